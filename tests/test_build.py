"""The build machinery: the JIT cache, its lock, its directory choice, the prebuilt library and
libjpeg-turbo discovery.

Every test that imports custom_op does it in fresh child processes, with an empty cache dir
(CUSTOM_OP_CACHE_DIR) and CUSTOM_OP_FORCE_JIT=1 so an installed prebuilt library cannot hide the
JIT path. builds.log in the cache gets one line per compiler run, which is how "built exactly
once" is checked. Tests marked slow compile the extension (about 20-60 s per build).
"""

import glob
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import load_package_module

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGE = ROOT / "custom_op"
WORKERS = TESTS / "build_workers.py"
WINDOW = (4, 6, 16, 20)  # must match build_workers.WINDOW
CHILD_TIMEOUT_S = 900  # generous: a build on a busy 2-core CI machine with many importers


cache_dir_mod = load_package_module("_cache_dir")
jpeg_paths = load_package_module("_jpeg_paths")
build_config = load_package_module("_build_config")


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def jpeg_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("jpeg") / "gradient.jpg"
    y, x = np.mgrid[0:48, 0:64]
    rgb = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    Image.fromarray(rgb).save(path, quality=95)
    return path


def reference_window(jpeg_path):
    top, left, height, width = WINDOW
    rgb = np.asarray(Image.open(jpeg_path).convert("RGB"))
    return torch.from_numpy(rgb[top : top + height, left : left + width].copy()).permute(2, 0, 1)


def child_env(cache, pythonpath=ROOT, **extra):
    env = dict(os.environ)
    env.update(
        CUSTOM_OP_CACHE_DIR=str(cache),
        CUSTOM_OP_FORCE_JIT="1",
        PYTHONPATH=os.pathsep.join([str(pythonpath), str(TESTS)]),
    )
    env.pop("CUSTOM_OP_VERBOSE_BUILD", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def build_count(cache):
    log = Path(cache) / "custom_op" / "builds.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def run_workers(args, env, cwd):
    return subprocess.run(
        [sys.executable, str(WORKERS), *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )


def assert_results(out_dir, expected, jpeg_path, batch=None):
    files = sorted(Path(out_dir).glob("result-*.pt"))
    assert len(files) == expected, f"{len(files)} of {expected} processes wrote a result"
    ref = reference_window(jpeg_path).to(torch.int16)
    for f in files:
        out = torch.load(f)
        assert out.dtype == torch.uint8
        outs = out.unbind(0) if batch else [out]
        for o in outs:
            assert o.shape == ref.shape
            # Pillow's libjpeg may round differently; a wrong window would differ by tens.
            assert (o.to(torch.int16) - ref).abs().float().mean() < 2.0


def private_build_dirs(cache):
    return [p for p in glob.glob(os.path.join(cache, "custom_op", "build", "*")) if os.path.isdir(p)]


def dirs(tmp_path, *names):
    made = [tmp_path / n for n in names]
    for d in made:
        d.mkdir()
    return made


# ---------------------------------------------------------------- concurrency


@pytest.mark.slow
def test_many_processes_first_import_at_once_build_once(tmp_path, jpeg_file):
    cache, out, barrier = dirs(tmp_path, "cache", "out", "barrier")
    # 4 forked (after torch is imported in their parent), 4 spawned, 2 plain subprocesses.
    r = run_workers(["mixed", jpeg_file, out, barrier, 4, 4, 2], child_env(cache), tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_results(out, 10, jpeg_file)
    assert build_count(cache) == 1, (Path(cache) / "custom_op" / "builds.log").read_text()
    assert r.stderr.count("custom_op: building the C++ library custom_op_cpu") == 1
    assert private_build_dirs(cache) == []


@pytest.mark.slow
def test_builder_killed_mid_build_does_not_block_the_next(tmp_path, jpeg_file):
    from filelock import FileLock

    cache, out, barrier, out_killed, barrier_killed = dirs(tmp_path, "cache", "out", "barrier", "ok", "bk")
    env = child_env(cache)
    victim = subprocess.Popen(
        [sys.executable, str(WORKERS), "child", *map(str, [jpeg_file, out_killed, barrier_killed, 1])],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    started = threading.Event()
    victim_err = []

    def read_stderr():
        for line in victim.stderr:
            victim_err.append(line)
            if "building the C++ library" in line:
                started.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert started.wait(300), "the builder never started: " + "".join(victim_err)
        # Wait until ninja has its build file, i.e. the compiler is being run.
        deadline = time.monotonic() + 120
        while not glob.glob(os.path.join(cache, "custom_op", "build", "*", "build.ninja")):
            assert time.monotonic() < deadline and victim.poll() is None, "".join(victim_err)
            time.sleep(0.05)
        time.sleep(1.0)
        assert victim.poll() is None, "the build finished before it could be killed"
        # Only the Python process: its ninja and compilers may live on as orphans, and
        # must not keep the lock (its descriptor is not inherited).
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(30)
        (lock_path,) = glob.glob(os.path.join(cache, "custom_op", "*.lock"))
        with FileLock(lock_path, timeout=10):
            pass
    finally:
        try:
            os.killpg(victim.pid, signal.SIGKILL)  # the orphans, so they do not slow the next build
        except ProcessLookupError:
            pass
        victim.wait(30)
        reader.join(30)

    assert build_count(cache) == 0
    r = run_workers(["mixed", jpeg_file, out, barrier, 2, 0, 2], env, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_results(out, 4, jpeg_file)
    assert build_count(cache) == 1
    assert private_build_dirs(cache) == [], "the dead builder's directory was not cleaned up"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_build_once(tmp_path, jpeg_file, method):
    cache, out = dirs(tmp_path, "cache", "out")
    r = run_workers(["dataloader", jpeg_file, out, method], child_env(cache), tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (result,) = Path(out).glob("result-*.pt")
    assert torch.load(result).shape == (16, 3, WINDOW[2], WINDOW[3])
    assert_results(out, 1, jpeg_file, batch=True)
    assert build_count(cache) == 1


# ---------------------------------------------------------------- cache root choice


def test_cache_root_precedence(tmp_path):
    a, b, c = (str(p) for p in dirs(tmp_path, "a", "b", "c"))
    env = {"CUSTOM_OP_CACHE_DIR": a, "TORCH_EXTENSIONS_DIR": b, "XDG_CACHE_HOME": c}
    assert cache_dir_mod.choose_cache_root(env) == a
    assert os.path.isdir(os.path.join(a, "custom_op"))
    del env["CUSTOM_OP_CACHE_DIR"]
    assert cache_dir_mod.choose_cache_root(env) == b
    del env["TORCH_EXTENSIONS_DIR"]
    assert cache_dir_mod.choose_cache_root(env) == c


def test_cache_root_defaults_to_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir_mod.cache_root_candidates({})[0] == str(tmp_path / ".cache")
    assert cache_dir_mod.choose_cache_root({}) == str(tmp_path / ".cache")


def test_unwritable_cache_root_falls_through(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # Under a regular file nothing can be created, even by root (chmod does not stop root).
    unwritable = str(blocker / "cache")
    good = str(tmp_path / "torch_ext")
    env = {"CUSTOM_OP_CACHE_DIR": unwritable, "TORCH_EXTENSIONS_DIR": good}
    with pytest.warns(UserWarning, match="not writable"):
        assert cache_dir_mod.choose_cache_root(env) == good


def test_all_roots_unwritable_falls_back_to_private_temp(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(cache_dir_mod.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    env = {"CUSTOM_OP_CACHE_DIR": str(blocker / "x"), "XDG_CACHE_HOME": str(blocker / "y")}
    with pytest.warns(UserWarning):
        root = cache_dir_mod.choose_cache_root(env)
    assert root == cache_dir_mod.private_temp_root()
    assert root.startswith(str(tmp_path / "tmp"))
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


# ---------------------------------------------------------------- libjpeg-turbo discovery

INSTALL_HINTS = [
    "apt-get install libjpeg-turbo8-dev",
    "apt-get install libjpeg62-turbo-dev",
    "libjpeg-turbo-devel",
    "conda install -c conda-forge libjpeg-turbo",
    "brew install jpeg-turbo",
    "CUSTOM_OP_JPEG_PREFIX",
]


def fake_prefix(root, jconfig_text, with_lib=True):
    (root / "include").mkdir(parents=True)
    (root / "include" / "jpeglib.h").write_text("/* fake */\n")
    (root / "include" / "jconfig.h").write_text(jconfig_text)
    if with_lib:
        (root / "lib").mkdir()
        (root / "lib" / "libjpeg.so").write_text("")
    return root


def test_missing_headers_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("CUSTOM_OP_JPEG_PREFIX", str(tmp_path))
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    with pytest.raises(jpeg_paths.LibjpegTurboNotFound) as info:
        jpeg_paths.find_libjpeg_turbo(search_system=False)
    for hint in INSTALL_HINTS:
        assert hint in str(info.value)
    assert str(tmp_path) in str(info.value)

    monkeypatch.delenv("CUSTOM_OP_JPEG_PREFIX")
    with pytest.raises(jpeg_paths.LibjpegTurboNotFound) as info:
        jpeg_paths.find_libjpeg_turbo([str(tmp_path)], search_system=False)
    for hint in INSTALL_HINTS:
        assert hint in str(info.value)


def test_rejects_plain_libjpeg_and_old_turbo(tmp_path, monkeypatch):
    monkeypatch.delenv("CUSTOM_OP_JPEG_PREFIX", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    ijg = fake_prefix(tmp_path / "ijg", "#define JPEG_LIB_VERSION 90\n")
    old = fake_prefix(tmp_path / "old", "#define LIBJPEG_TURBO_VERSION 1.4.2\n")
    nolib = fake_prefix(tmp_path / "nolib", "#define LIBJPEG_TURBO_VERSION 2.1.5\n", with_lib=False)
    with pytest.raises(jpeg_paths.LibjpegTurboNotFound) as info:
        jpeg_paths.find_libjpeg_turbo([str(ijg), str(old), str(nolib)], search_system=False)
    message = str(info.value)
    assert "not libjpeg-turbo" in message and "1.4.2 is older" in message and "no libjpeg.so" in message


def test_finds_custom_prefix_with_rpath(tmp_path, monkeypatch):
    prefix = fake_prefix(tmp_path / "p", "#define LIBJPEG_TURBO_VERSION  3.0.1\n")
    monkeypatch.setenv("CUSTOM_OP_JPEG_PREFIX", str(prefix))
    found = jpeg_paths.find_libjpeg_turbo(search_system=False)
    assert found.version == "3.0.1"
    assert found.library_dirs == [str(prefix / "lib")] and found.libraries == ["jpeg"]
    flags = build_config.link_flags(found)
    # The file itself, not -ljpeg: setuptools puts Python's LIBDIR (where a system libjpeg may be)
    # before our -L on the link line.
    assert f"-Wl,-rpath,{prefix / 'lib'}" in flags and str(prefix / "lib" / "libjpeg.so") in flags
    assert "-ljpeg" not in flags
    (prefix / "lib" / "libjpeg.so").unlink()
    assert "-ljpeg" in build_config.link_flags(found)


def test_system_libjpeg_turbo_is_found():
    if not os.path.exists("/usr/include/jpeglib.h"):
        pytest.skip("no libjpeg headers in /usr/include on this machine")
    found = jpeg_paths.find_libjpeg_turbo(use_env=False)
    assert tuple(int(p) for p in found.version.split(".")[:2]) >= (1, 5)


def test_import_without_headers_fails_with_instructions(tmp_path):
    cache, empty = dirs(tmp_path, "cache", "empty")
    env = child_env(cache, CUSTOM_OP_JPEG_PREFIX=empty)
    r = subprocess.run(
        [sys.executable, "-c", "import custom_op"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert r.returncode != 0
    for hint in INSTALL_HINTS:
        assert hint in r.stderr
    assert build_count(cache) == 0


def test_source_hash_covers_headers_but_not_cuda_dir(tmp_path):
    csrc = tmp_path / "csrc"
    shutil.copytree(PACKAGE / "csrc", csrc)
    jpeg = jpeg_paths.find_libjpeg_turbo()

    def source_hash():
        return build_config.cpu_library(jpeg, str(csrc)).source_hash()

    before = source_hash()
    # csrc/cuda/ belongs to the GPU library: its files must not invalidate the CPU one.
    (csrc / "cuda").mkdir(exist_ok=True)
    (csrc / "cuda" / "test_only_kernels.cpp").write_text("// another library's source\n")
    (csrc / "cuda" / "test_only_kernels.h").write_text("// another library's header\n")
    assert source_hash() == before
    assert all(
        "cuda" not in os.path.relpath(p, csrc).split(os.sep)
        for p in build_config.cpu_sources(str(csrc)) + build_config.cpu_headers(str(csrc))
    )
    headers = build_config.cpu_headers(str(csrc))
    assert headers, "expected headers under csrc"
    with open(headers[0], "a") as f:
        f.write("\n// edited\n")
    assert source_hash() != before


def test_the_cpu_library_serves_every_torch_from_its_stable_abi_target():
    """The CPU library is built on torch's stable ABI, targeting 2.10: its buildinfo records the torch it
    was built with but is current under every torch from 2.10 on, and none older can load it."""
    library = build_config.cpu_library(jpeg_paths.find_libjpeg_turbo())
    assert library.stable_abi == "2.10" and "-DTORCH_TARGET_VERSION=0x020a000000000000" in library.cflags
    info = library.buildinfo("2.13.0+cpu")
    assert info["torch_version"] == "2.13.0+cpu" and info["stable_abi"] == "2.10"
    for torch_version in ("2.10.0", "2.13.0+cpu", "2.14.1+cu130", "3.0.0a0"):
        assert library.current(torch_version, None).items() <= info.items(), torch_version
        assert library.unserved_reason(torch_version) is None, torch_version
    for torch_version in ("2.9.1", "2.4.0+cu121", "1.13.1"):
        assert library.unserved_reason(torch_version) == (
            f"custom_op needs torch >= 2.10; torch {torch_version} is installed (upgrade torch)"
        )
    assert build_config.release("2.14.1+cu130") == (2, 14) and build_config.release("2.10") == (2, 10)


# ---------------------------------------------------------------- installed, read-only package


def copy_package(dest_site):
    shutil.copytree(
        PACKAGE,
        dest_site / "custom_op",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", build_config.PREBUILT_INFO),
    )


def snapshot(tree):
    return sorted(str(p.relative_to(tree)) for p in Path(tree).rglob("*"))


def read_only_command(site, argv):
    """chmod stops ordinary users; root also needs a read-only bind mount, where it can make one."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return argv, "chmod"
    probe_dir = site.parent / "mount-probe"
    probe_dir.mkdir(exist_ok=True)
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", 'mount --bind -o ro "$0" "$0" && ! touch "$0/probe"', str(probe_dir)],
        capture_output=True,
    )
    if probe.returncode != 0 or (probe_dir / "probe").exists():
        return argv, "chmod (running as root: not enforced)"
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, str(site), *argv], "read-only mount"


INFO_SCRIPT = """
import json, sys
import custom_op
from custom_op import _build
data = open(sys.argv[1], "rb").read()
out = custom_op.decode_and_crop_jpeg(data, 4, 6, 16, 20)
print(json.dumps({"info": _build.library_info(), "shape": list(out.shape)}))
"""


def run_info(env, cwd, jpeg, wrap=None):
    argv = [sys.executable, "-c", INFO_SCRIPT, str(jpeg)]
    if wrap:
        argv = wrap(argv)
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r


@pytest.fixture(scope="module")
def readonly_install(tmp_path_factory, jpeg_file):
    """The package copied into a read-only 'site-packages' (no prebuilt library), first imported
    with an empty cache: that one build is shared by the tests below."""
    base = tmp_path_factory.mktemp("ro")
    site, cache = base / "site-packages", base / "cache"
    site.mkdir()
    cache.mkdir()
    copy_package(site)
    for p in [site, *site.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    before = snapshot(site)
    env = child_env(cache, pythonpath=site)
    result, run = run_info(env, base, jpeg_file, wrap=lambda argv: read_only_command(site, argv)[0])
    yield {
        "site": site,
        "cache": cache,
        "env": env,
        "base": base,
        "before": before,
        "result": result,
        "stderr": run.stderr,
    }
    for p in [site, *site.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.mark.slow
def test_read_only_package_builds_into_cache_root(readonly_install):
    ro = readonly_install
    info = ro["result"]["info"]
    assert ro["result"]["shape"] == [3, WINDOW[2], WINDOW[3]]
    assert info["kind"] == "jit" and info["built"] == "yes"
    assert Path(info["path"]).is_relative_to(ro["cache"] / "custom_op")
    assert snapshot(ro["site"]) == ro["before"], "something was written into the package dir"
    assert build_count(ro["cache"]) == 1
    assert "building the C++ library custom_op_cpu" in ro["stderr"]
    # The hint is honest: no more than twice what the build took (a busy machine only makes the build slower).
    claimed = int(re.search(r"takes about (\d+) s", ro["stderr"]).group(1))
    took = float(re.search(r"seconds=([\d.]+)", (ro["cache"] / "custom_op" / "builds.log").read_text()).group(1))
    assert claimed <= 2 * took + 5, (claimed, took)


@pytest.mark.slow
def test_warm_cache_import_takes_no_lock(readonly_install, jpeg_file):
    ro = readonly_install
    locks = glob.glob(os.path.join(ro["cache"], "custom_op", "*.lock"))
    stamps = {p: os.stat(p).st_mtime_ns for p in locks}
    code = (
        "import filelock\n"
        "class NoLock:\n"
        "    def __init__(self, *a, **k):\n"
        "        raise AssertionError('FileLock used although the cache was warm')\n"
        "filelock.FileLock = NoLock\n" + INFO_SCRIPT
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(jpeg_file)],
        env=ro["env"],
        cwd=ro["base"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["info"]["built"] == "no" and result["shape"] == [3, WINDOW[2], WINDOW[3]]
    assert "building" not in r.stderr
    assert {p: os.stat(p).st_mtime_ns for p in locks} == stamps
    assert build_count(ro["cache"]) == 1


@pytest.mark.slow
def test_prebuilt_library_used_only_when_current(readonly_install, jpeg_file, tmp_path):
    """A library placed as custom_op/_C*.so with a matching _C.buildinfo.json is loaded without
    any cache, whichever torch it was built with; a stale buildinfo or CUSTOM_OP_FORCE_JIT=1 sends the
    loader to the JIT cache."""
    ro = readonly_install
    site = tmp_path / "site-packages"
    site.mkdir()
    copy_package(site)
    pkg = site / "custom_op"
    built = ro["result"]["info"]["path"]  # the JIT build stands in for setup.py's (same sources and flags)
    shutil.copy(built, pkg / ("_C" + importlib.machinery.EXTENSION_SUFFIXES[0]))
    jpeg = jpeg_paths.find_libjpeg_turbo()
    info = build_config.cpu_library(jpeg, str(pkg / "csrc")).buildinfo(torch.__version__)
    build_config.write_prebuilt_info(str(pkg / build_config.PREBUILT_INFO), info)

    empty = tmp_path / "empty-cache"
    env = child_env(empty, pythonpath=site)
    del env["CUSTOM_OP_FORCE_JIT"]
    result, _ = run_info(env, tmp_path, jpeg_file)
    assert result["info"]["kind"] == "prebuilt" and result["info"]["path"].startswith(str(pkg))
    assert result["shape"] == [3, WINDOW[2], WINDOW[3]]
    assert build_count(empty) == 0

    warm = dict(env, CUSTOM_OP_CACHE_DIR=str(ro["cache"]))
    result, _ = run_info(dict(warm, CUSTOM_OP_FORCE_JIT="1"), tmp_path, jpeg_file)
    assert result["info"]["kind"] == "jit"

    # Built with another torch: on the stable ABI, it serves this one too.
    build_config.write_prebuilt_info(str(pkg / build_config.PREBUILT_INFO), {**info, "torch_version": "2.10.0"})
    result, _ = run_info(warm, tmp_path, jpeg_file)
    assert result["info"]["kind"] == "prebuilt" and result["info"]["stable_abi"] == "2.10"

    for stale in ({"source_hash": "0" * 64}, {"stable_abi": "2.99"}, {"python": "cpython-27-elsewhere"}):
        build_config.write_prebuilt_info(str(pkg / build_config.PREBUILT_INFO), {**info, **stale})
        result, _ = run_info(warm, tmp_path, jpeg_file)
        assert result["info"]["kind"] == "jit", stale
    assert build_count(ro["cache"]) == 1


@pytest.mark.slow
def test_lock_timeout_names_the_lock(readonly_install, jpeg_file, tmp_path):
    from filelock import FileLock

    ro = readonly_install
    key = os.path.basename(ro["result"]["info"]["cache_dir"])
    cache = tmp_path / "cache"
    (cache / "custom_op").mkdir(parents=True)
    lock_path = cache / "custom_op" / f"{key}.lock"
    env = dict(ro["env"], CUSTOM_OP_CACHE_DIR=str(cache), CUSTOM_OP_BUILD_LOCK_TIMEOUT="2")
    with FileLock(str(lock_path)):  # another "builder" holds it
        r = subprocess.run(
            [sys.executable, "-c", INFO_SCRIPT, str(jpeg_file)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert r.returncode != 0
    assert "TimeoutError" in r.stderr and str(lock_path) in r.stderr
    assert "CUSTOM_OP_BUILD_LOCK_TIMEOUT" in r.stderr
    assert build_count(cache) == 0


@pytest.mark.slow
def test_cli_build_and_info(readonly_install, tmp_path):
    ro = readonly_install
    r = subprocess.run(
        [sys.executable, "-m", "custom_op", "build"],
        env=ro["env"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("already built: ") and ro["result"]["info"]["path"] in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "custom_op", "info"],
        env=ro["env"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "kind:           jit" in r.stdout and "libjpeg-turbo:  " in r.stdout
    assert build_count(ro["cache"]) == 1


# ---------------------------------------------------------------- install-time progress

_PROGRESS_CHILD = """
import importlib.util, os, subprocess, sys
spec = importlib.util.spec_from_file_location("progress", sys.argv[1])
progress = importlib.util.module_from_spec(spec)
spec.loader.exec_module(progress)
ninja, folder, terminal_path = sys.argv[2], sys.argv[3], sys.argv[4]
terminal = open(terminal_path, "w") if terminal_path != "-" else None
print("before", flush=True)
with progress.reporting("the C++ library", terminal=terminal):
    print("status:", os.environ.get("NINJA_STATUS"), flush=True)
    # As torch.utils.cpp_extension runs it: ninja -v, its output to file descriptor 1.
    subprocess.run([ninja, "-v", "-j", "1"], cwd=folder, stdout=1, stderr=subprocess.STDOUT, check=True)
print("after", os.environ.get("NINJA_STATUS"), flush=True)
"""


def _ninja() -> str:
    found = shutil.which("ninja")
    if found is None:
        import ninja  # the pip package (a dependency): its binary need not be on PATH

        found = os.path.join(ninja.BIN_DIR, "ninja")
    return found


@pytest.mark.parametrize("terminal", [True, False])
def test_the_install_says_how_many_files_are_compiled(tmp_path, terminal):
    """pip hides the build's output (without -v), so setup.py's compile writes '3 of 15 files' lines to
    the terminal as ninja finishes each file, and passes the output on unchanged; without a terminal
    (CI, no /dev/tty) it changes nothing."""
    folder = tmp_path / "build"
    folder.mkdir()
    rules = ["rule cc", "  command = echo compiled $out > $out"]
    (folder / "build.ninja").write_text("\n".join(rules + [f"build {n}.o: cc" for n in "abc"]) + "\n")
    shown = tmp_path / "terminal.txt"
    # A new session has no controlling terminal: with terminal=False, /dev/tty cannot be opened.
    run = subprocess.run(
        [sys.executable, "-c", _PROGRESS_CHILD, str(PACKAGE / "_build_progress.py"), _ninja(), str(folder)]
        + [str(shown) if terminal else "-"],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
        env={**os.environ, "NINJA_STATUS": "user's status: "},
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # What pip receives: everything, in order; ninja's lines as it writes them.
    assert lines[0] == "before" and lines[-1] == "after user's status: "
    commands = [f"echo compiled {n}.o > {n}.o" for n in "abc"]
    if terminal:
        assert lines[1:-1] == ["status: [%f/%t] "] + [f"[{i}/3] {c}" for i, c in enumerate(commands, 1)]
        # A line of its own after pip's spinner, then each line over the spinner's character.
        said = shown.read_bytes().decode().split("\n")
        assert said[0] == "" and said[-1] == "" and len(said) == 5, said
        for i, line in enumerate(said[1:-1], 1):
            start = "" if i == 1 else "\r"
            expected = rf"{start}    custom_op: compiling the C\+\+ library: {i} of 3 files \(\d+ s\)"
            assert re.fullmatch(expected, line), line
    else:
        assert lines[1:-1] == ["status: user's status: "] + [f"user's status: {c}" for c in commands]
        assert not shown.exists()


def test_the_readme_shows_the_install_progress_line():
    """The README's Quick start quotes the line the install writes, for the C++ library's files."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    quoted = re.search(r"`custom_op: compiling the C\+\+ library: \d+ of (\d+) files \(\d+ s\)`", readme)
    assert quoted and int(quoted[1]) == len(build_config.cpu_sources())
