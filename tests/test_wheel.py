"""The wheel and the editable install, as CONTRIBUTING.md and the Quick start use them.

- `pip wheel --no-build-isolation --no-deps -w dist .` builds a wheel that holds the compiled library and
  only the `custom_op` package; installed into a fresh venv, it decodes with nothing compiled at import.
- `pip install --no-build-isolation -e .` builds the library in place (custom_op/_C*.so and its buildinfo),
  so the checkout's package, which `python -m ...` and pytest import from the clone root, loads it without
  compiling.

- The same wheel installed beside other torch versions, each in a venv of its own with that torch installed
  from the package index, decodes with nothing compiled: the CPU library is built on torch's stable ABI.
  Opt-in (CUSTOM_OP_TEST_TORCH_WHEELS=1, or a comma-separated list of versions), since a CUDA torch's venv
  takes several GB and minutes to install.

Both build from a copy of the checkout (its build/, dist/ and custom_op/ stay untouched), in one venv, and
share the copy's build/ folder, so the C++ library is compiled once for the module (about 20 s on 2 cores)
and linked twice. The fresh venvs get torch without installing it: a .pth file in each adds the
site-packages folders of this interpreter's torch, filelock, pip and setuptools after the venv's own
site-packages, so the venv's custom_op wins.
Children run from a folder outside the checkout, without PYTHONPATH, with an empty CUSTOM_OP_CACHE_DIR.
"""

import email.parser
import importlib.machinery
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import load_package_module

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 900  # a build on a busy 2-core machine
RUN_TIMEOUT_S = 300
WINDOW = (4, 6, 16, 20)
# Not copied from the checkout: what git ignores, when git cannot list the files.
UNCOPIED = (
    "*.egg-info",
    "*.so",
    "*.o",
    "*.pyc",
    "__pycache__",
    "_C*.buildinfo.json",
    ".git",
    ".venv",
    ".cache",
    ".pytest_cache",
    ".ruff_cache",
    ".whl",
    ".device",
    ".gpu_extras",
    "build",
    "dist",
    "runs",
)

build_config = load_package_module("_build_config")

DECODE_SCRIPT = """
import json, sys
import torch
import custom_op
data = open(sys.argv[1], "rb").read()
torch.save(custom_op.decode_and_crop_jpeg(data, *map(int, sys.argv[3:7])), sys.argv[2])
print(json.dumps({"file": custom_op.__file__, "info": custom_op.library_info(),
                  "path": sys.path, "modules": sorted(m.split(".")[0] for m in sys.modules)}))
"""


def _site_dir(distribution):
    """The folder holding an installed distribution (its metadata, not an import: importing pip or setuptools
    here would let setuptools' distutils hack warn)."""
    try:
        return str(Path(importlib.metadata.distribution(distribution).locate_file("")).resolve())
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed here, so a fresh venv cannot borrow it")


def _copy_checkout(dest):
    """The files `pip wheel .` in the checkout would see: git's tracked and untracked, unignored files."""
    try:
        listed = (
            subprocess.run(
                ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                capture_output=True,
                check=True,
                timeout=60,
            )
            .stdout.decode()
            .split("\0")
        )
    except (OSError, subprocess.SubprocessError):
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*UNCOPIED), dirs_exist_ok=True)
        return
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():  # deleted files are still listed until the deletion is committed
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)


def _env(cache, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "CUSTOM_OP_FORCE_JIT", "CUSTOM_OP_VERBOSE_BUILD")
    }
    path = [os.path.dirname(sys.executable)]  # what activating this venv does: its ninja and compilers' tools
    try:
        import ninja

        path.append(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    env.update(
        PATH=os.pathsep.join(path + [env.get("PATH", "")]),
        CUSTOM_OP_CACHE_DIR=str(cache),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        **extra,
    )
    return env


def _run(argv, cwd, env, timeout=RUN_TIMEOUT_S):
    r = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, argv))} failed in {cwd}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return r


def _fresh_venv(path):
    """A venv without pip whose site-packages come first, then those of this interpreter's torch and pip."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=RUN_TIMEOUT_S)
    python = path / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    borrowed = dict.fromkeys(_site_dir(m) for m in ("torch", "filelock", "pip", "setuptools"))
    (site / "zz_borrowed_from_the_test_interpreter.pth").write_text("".join(f"{d}\n" for d in borrowed))
    return python, site


def _decode(python, cwd, cache, jpeg):
    out = cwd / "window.pt"
    r = _run([python, "-c", DECODE_SCRIPT, jpeg, out, *WINDOW], cwd, _env(cache))
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result["stderr"] = r.stderr
    result["window"] = torch.load(out)
    return result


def _assert_window(window, jpeg):
    top, left, height, width = WINDOW
    rgb = np.asarray(Image.open(jpeg).convert("RGB"))[top : top + height, left : left + width]
    assert window.dtype == torch.uint8 and tuple(window.shape) == (3, height, width)
    # Pillow's libjpeg may round differently; a wrong window would differ by tens.
    assert (window.to(torch.int16) - torch.from_numpy(rgb.copy()).permute(2, 0, 1)).abs().float().mean() < 2.0


@pytest.fixture(scope="module")
def jpeg(tmp_path_factory):
    path = tmp_path_factory.mktemp("jpeg") / "gradient.jpg"
    y, x = np.mgrid[0:48, 0:64]
    Image.fromarray(np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)).save(path, quality=95)
    return path


@pytest.fixture(scope="module")
def checkout_copy(tmp_path_factory):
    _site_dir("pip")  # or a skip
    dest = tmp_path_factory.mktemp("checkout") / "custom_op-src"
    dest.mkdir()
    _copy_checkout(dest)
    return dest


@pytest.fixture(scope="module")
def build_venv(tmp_path_factory):
    """The venv both builds run in: the same interpreter gives the same compiler commands, so the second
    build reuses the first one's objects."""
    return _fresh_venv(tmp_path_factory.mktemp("build-venv") / "venv")


@pytest.fixture(scope="module")
def wheel(checkout_copy, build_venv, tmp_path_factory):
    """The documented command, run in the copy."""
    cache = tmp_path_factory.mktemp("wheel-build-cache")
    _run(
        [build_venv[0], "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", "dist", "."],
        checkout_copy,
        _env(cache),
        timeout=BUILD_TIMEOUT_S,
    )
    wheels = list((checkout_copy / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_holds_the_library_the_sources_and_only_custom_op(wheel, checkout_copy):
    names = set(zipfile.ZipFile(wheel).namelist())
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith("custom_op-0.1.0-") and f"-{tag}-" in wheel.name, wheel.name  # platform-specific
    # Only custom_op: a top-level datasets/ would shadow Hugging Face's datasets, tests/ has no place there.
    assert {n.split("/")[0] for n in names} == {"custom_op", "custom_op-0.1.0.dist-info"}, sorted(names)
    library = "custom_op/_C" + importlib.machinery.EXTENSION_SUFFIXES[0]
    assert library in names and "custom_op/" + build_config.PREBUILT_INFO in names
    package = checkout_copy / "custom_op"
    python_files = {f"custom_op/{p.relative_to(package)}" for p in package.rglob("*.py")}
    assert python_files <= names, python_files - names
    # The C++ sources and headers ship: the JIT build needs them, and the loader hashes them.
    suffixes = build_config.SOURCE_SUFFIXES + build_config.HEADER_SUFFIXES
    csrc = {f"custom_op/{p.relative_to(package)}" for p in (package / "csrc").rglob("*") if p.suffix in suffixes}
    assert csrc and {n for n in names if n.startswith("custom_op/csrc/")} == csrc

    dist_info = "custom_op-0.1.0.dist-info/"
    assert dist_info + "licenses/LICENSE" in names
    with zipfile.ZipFile(wheel) as z:
        meta = email.parser.Parser().parsestr(z.read(dist_info + "METADATA").decode())
        wheel_info = z.read(dist_info + "WHEEL").decode()
    assert "Root-Is-Purelib: false" in wheel_info
    assert meta["Name"] == "custom_op" and meta["Version"] == "0.1.0"
    assert meta["License-Expression"] == "BSD-3-Clause" and meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.9"
    assert meta["Description-Content-Type"] == "text/markdown" and meta.get_payload().strip()
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3" in classifiers and "Operating System :: POSIX :: Linux" in classifiers
    requires = meta.get_all("Requires-Dist")
    assert "torch>=2.10" in requires and any(r.startswith("filelock") for r in requires)


def test_wheel_in_a_fresh_venv_decodes_with_nothing_compiled(wheel, jpeg, tmp_path):
    python, site = _fresh_venv(tmp_path / "venv")
    cache, cwd = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    cwd.mkdir()
    # --ignore-installed: the borrowed site-packages may hold another custom_op (the checkout's editable one).
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel], cwd, _env(cache))
    result = _decode(python, cwd, cache, jpeg)
    assert Path(result["file"]).is_relative_to(site), result["file"]  # the wheel's copy, not the checkout's
    assert str(ROOT) not in {str(Path(p).resolve()) for p in result["path"] if p}, result["path"]
    info = result["info"]
    assert info["kind"] == "prebuilt" and Path(info["path"]).is_relative_to(site / "custom_op"), info
    assert info["built"] == "no" and "building" not in result["stderr"]
    assert not any(cache.iterdir()), "the import created a JIT cache"
    assert not {"datasets", "profiling", "sm_job"} & set(result["modules"])
    _assert_window(result["window"], jpeg)


def test_editable_install_builds_in_place_and_the_checkout_loads_it(checkout_copy, build_venv, jpeg, tmp_path):
    """What the Quick start does: `pip install -e .` in the clone, then run from the clone root."""
    python, _ = build_venv
    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            "-e",
            ".",
        ],
        checkout_copy,
        _env(cache),
        timeout=BUILD_TIMEOUT_S,
    )
    package = checkout_copy / "custom_op"
    assert list(package.glob("_C.*.so")) and (package / build_config.PREBUILT_INFO).is_file()

    for cwd in (checkout_copy, elsewhere):  # the clone root (python -m profiling, pytest), anywhere else
        result = _decode(python, cwd, cache, jpeg)
        assert Path(result["file"]).is_relative_to(package), (cwd, result["file"])
        info = result["info"]
        assert info["kind"] == "prebuilt" and Path(info["path"]).parent == package, (cwd, info)
        assert "building" not in result["stderr"]
        assert not any(cache.iterdir()), f"the import from {cwd} created a JIT cache"
        _assert_window(result["window"], jpeg)


# ---------------------------------------------------------------- one wheel, several torch versions

TORCH_VERSIONS_ENV = "CUSTOM_OP_TEST_TORCH_WHEELS"
# The torch the wheel is built with here, and a later one whose C++ ABI differs.
DEFAULT_TORCH_VERSIONS = ("2.13.0", "2.14.1")
TORCH_INSTALL_TIMEOUT_S = 1800  # a CUDA torch's wheels, several GB, from a local index

OTHER_TORCH_SCRIPT = """
import json, sys
import torch
import custom_op
from custom_op import _outcomes

data = open(sys.argv[1], "rb").read()
torch.save(custom_op.decode_and_crop_jpeg(data, *map(int, sys.argv[3:7])), sys.argv[2])
errors = {}
calls = {
    # Raised in the CPU library and typed through the stable ABI by the message's tag.
    "window outside": lambda: custom_op.decode_and_crop_jpeg(data, 0, 0, 4096, 4096),
    "over max_pixels": lambda: custom_op.decode_jpeg(data, max_pixels=10),
    "2-D data": lambda: _outcomes.call(
        torch.ops.custom_op.decode_jpeg, torch.zeros(2, 8, dtype=torch.uint8),
        mode=2, apply_exif_orientation=False, on_warning=0, max_pixels=0,
    ),
    "not a JPEG": lambda: custom_op.decode_jpeg(b"not a JPEG"),
    # A batch item's type travels as its status.
    "batch items": lambda: custom_op.decode_and_crop_jpegs(
        [data, b"not a JPEG", data], [0, 0, 0], [0, 0, 0], [8, 8, 4096], [8, 8, 4096], on_error="return"
    ),
}
for name, call in calls.items():
    try:
        out = call()
        errors[name] = [[type(e).__name__, str(e)] for e in out if isinstance(e, Exception)]
    except Exception as e:
        errors[name] = [type(e).__name__, str(e)]
print(json.dumps({"torch": torch.__version__, "file": custom_op.__file__, "info": custom_op.library_info(),
                  "errors": errors}))
"""


def _torch_versions() -> list[str]:
    raw = os.environ.get(TORCH_VERSIONS_ENV, "").strip()
    if raw in ("", "0"):
        return []
    return list(DEFAULT_TORCH_VERSIONS) if raw == "1" else [v.strip() for v in raw.split(",") if v.strip()]


@pytest.mark.skipif(
    not _torch_versions(),
    reason=f"installs torch {' and '.join(DEFAULT_TORCH_VERSIONS)} into fresh venvs (a CUDA torch takes several "
    f"GB and minutes): set {TORCH_VERSIONS_ENV}=1, or to a comma-separated list of versions",
)
@pytest.mark.parametrize("torch_version", _torch_versions() or list(DEFAULT_TORCH_VERSIONS))
def test_one_wheel_serves_other_torch_versions(wheel, jpeg, tmp_path, torch_version):
    """The wheel built here, installed into a fresh venv with its own torch (installed by pip, not
    borrowed), imports and decodes with the prebuilt CPU library, compiling nothing, and raises each
    error as its type."""
    venv, cache, cwd = tmp_path / "venv", tmp_path / "cache", tmp_path / "elsewhere"
    cli_cache = tmp_path / "cli-cache"  # `info` makes the cache root it reports
    for d in (cache, cwd, cli_cache):
        d.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=RUN_TIMEOUT_S)
    python = venv / "bin" / "python"
    # This interpreter's pip installs into the venv; the package index is pip's configured one.
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-input"]
    timings = {}
    try:
        started = time.monotonic()
        r = subprocess.run(
            [str(a) for a in pip + [f"torch=={torch_version}"]],
            cwd=cwd,
            env=_env(cache),
            capture_output=True,
            text=True,
            timeout=TORCH_INSTALL_TIMEOUT_S,
        )
        if r.returncode != 0:
            if "No matching distribution" in r.stderr or "Could not find a version" in r.stderr:
                pytest.skip(f"torch=={torch_version} cannot be installed here: {r.stderr.strip().splitlines()[-1]}")
            raise AssertionError(f"installing torch=={torch_version} failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
        timings["torch install"] = time.monotonic() - started
        started = time.monotonic()
        _run(pip + ["--no-deps", "--no-index", wheel], cwd, _env(cache))
        timings["wheel install"] = time.monotonic() - started

        started = time.monotonic()
        out = cwd / "window.pt"
        r = _run([python, "-c", OTHER_TORCH_SCRIPT, jpeg, out, *WINDOW], cwd, _env(cache))
        timings["import, decode and errors"] = time.monotonic() - started
        result = json.loads(r.stdout.strip().splitlines()[-1])
        started = time.monotonic()
        cli = _run([python, "-m", "custom_op", "info"], cwd, _env(cli_cache))
        timings["python -m custom_op info"] = time.monotonic() - started
        print(f"\ntorch {torch_version}: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))

        assert result["torch"].split("+")[0] == torch_version, result["torch"]
        assert Path(result["file"]).is_relative_to(venv), result["file"]
        info = result["info"]
        assert info["kind"] == "prebuilt" and Path(info["path"]).is_relative_to(venv), info
        assert info["built"] == "no" and info["stable_abi"] == "2.10", info
        assert "building" not in r.stderr + cli.stderr, r.stderr + cli.stderr
        assert not any(cache.iterdir()), f"the import created a JIT cache: {sorted(cache.rglob('*'))}"
        assert "kind:           prebuilt" in cli.stdout and "torch >= 2.10" in cli.stdout, cli.stdout
        _assert_window(torch.load(out), jpeg)

        errors = result["errors"]
        assert errors["window outside"][0] == "ValueError", errors
        assert errors["window outside"][1].startswith("custom_op: crop window (top=0, left=0, height=4096"), errors
        assert errors["over max_pixels"][0] == "ValueError" and "max_pixels=10" in errors["over max_pixels"][1]
        assert errors["2-D data"] == ["TypeError", "custom_op: decode_jpeg: data must be 1-D, got 2 dimensions"]
        assert errors["not a JPEG"][0] == "RuntimeError", errors
        assert errors["not a JPEG"][1].startswith("custom_op: cannot decode JPEG header"), errors
        bad_file, bad_window = errors["batch items"]
        assert bad_file[0] == "RuntimeError" and bad_file[1].startswith("custom_op: batch item 1: cannot decode")
        assert bad_window[0] == "ValueError" and bad_window[1].startswith("custom_op: batch item 2: crop window")
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # a CUDA torch's venv is several GB
