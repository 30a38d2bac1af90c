"""The prebuilt GPU (nvJPEG) library: whether setup.py builds it (CUSTOM_OP_BUILD_CUDA and the facts of
the build environment), what it compiles, and when the loader takes a prebuilt library as current.

Runs without CUDA: the decision is tested from given facts, and setup.py itself in child processes
(only its configuration step, which builds nothing). Building and loading the prebuilt GPU library is
checked on the GPU machine by bench/device_aot_check.sh.
"""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import load_package_module

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "custom_op"


config = load_package_module("_build_config")
nvjpeg_paths = load_package_module("_nvjpeg_paths")

GOOD_FACTS = dict(
    torch_version="2.11.0+cu130",
    torch_cuda="13.0",
    nvcc="/usr/local/cuda/bin/nvcc",
    nvjpeg_error=None,
    arch_list=None,
    visible_gpus=1,
)


# ---------------------------------------------------------------- the decision, from given facts


@pytest.mark.parametrize(
    "raw, mode",
    [
        (None, "auto"),
        ("", "auto"),
        (" AUTO ", "auto"),
        ("0", "0"),
        ("off", "0"),
        ("false", "0"),
        ("1", "1"),
        ("yes", "1"),
        ("ON", "1"),
    ],
)
def test_build_mode_values(raw, mode):
    assert config.parse_build_mode(raw) == mode


def test_unknown_build_mode_is_an_error_naming_the_variable():
    with pytest.raises(ValueError, match="CUSTOM_OP_BUILD_CUDA='maybe': expected auto, 0 or 1"):
        config.parse_build_mode("maybe")


def test_builds_when_every_fact_allows_it():
    assert config.cuda_unbuildable_reason(**GOOD_FACTS) is None
    # No GPU visible is fine when the architectures are given.
    assert config.cuda_unbuildable_reason(**{**GOOD_FACTS, "visible_gpus": 0, "arch_list": "9.0"}) is None
    assert config.decide_cuda_build("auto", None) == ("build", None)
    assert config.decide_cuda_build("1", None) == ("build", None)


@pytest.mark.parametrize(
    "facts, says",
    [
        ({"torch_version": None, "torch_cuda": None}, "torch is not importable"),
        (
            {"torch_version": "2.13.0+cpu", "torch_cuda": None},
            "torch 2.13.0+cpu in the build environment is built without CUDA",
        ),
        ({"nvcc": None}, "nvcc was not found (set CUDA_HOME"),
        (
            {
                "nvjpeg_error": "custom_op: nvJPEG (nvjpeg.h and libnvjpeg.so) was not found. "
                "Searched:\n  - /x: no include"
            },
            "nvJPEG (nvjpeg.h and libnvjpeg.so) was not found "
            "(python custom_op/_nvjpeg_paths.py shows where it looked)",
        ),
        ({"visible_gpus": 0}, "set TORCH_CUDA_ARCH_LIST"),
    ],
)
def test_each_missing_fact_is_the_reason(facts, says):
    reason = config.cuda_unbuildable_reason(**{**GOOD_FACTS, **facts})
    assert reason is not None and says in reason and "\n" not in reason


def test_auto_skips_with_one_warning_line_1_fails_0_is_silent():
    reason = config.cuda_unbuildable_reason(**{**GOOD_FACTS, "torch_cuda": None, "torch_version": "2.13.0+cpu"})
    action, message = config.decide_cuda_build("auto", reason)
    assert action == "skip" and message.startswith("WARNING: custom_op: the CUDA (nvJPEG) library is not prebuilt: ")
    assert reason in message and "\n" not in message and "CUSTOM_OP_BUILD_CUDA=0" in message
    action, message = config.decide_cuda_build("1", reason)
    assert action == "error" and "CUSTOM_OP_BUILD_CUDA=1" in message and reason in message
    assert config.decide_cuda_build("0", reason) == ("skip", None)
    assert config.decide_cuda_build("0", None) == ("skip", None)


def test_a_real_nvjpeg_search_failure_makes_a_one_line_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(nvjpeg_paths.PREFIX_ENV, str(tmp_path))
    with pytest.raises(nvjpeg_paths.NvjpegNotFound) as error:
        nvjpeg_paths.find_nvjpeg()
    reason = config.cuda_unbuildable_reason(**{**GOOD_FACTS, "nvjpeg_error": str(error.value)})
    assert f"CUSTOM_OP_NVJPEG_PREFIX={tmp_path} does not hold nvJPEG" in reason and "\n" not in reason
    _, message = config.decide_cuda_build("auto", reason)
    assert "\n" not in message


# ---------------------------------------------------------------- what the GPU library is built from


class _Nvjpeg:
    include_dir, library_dir, library_file, version = "/nv/include", "/nv/lib", "libnvjpeg.so.13", "13.0.1"

    def link_flags(self):
        return ["-L/nv/lib", "-l:libnvjpeg.so.13"]


def test_cuda_sources_are_the_cuda_and_common_dirs(tmp_path):
    """The GPU library compiles csrc/cuda/ and csrc/common/ (the EXIF reader, the restart-segment plans,
    shared types) and includes csrc/jpeg_core/, never the CPU library's csrc/cpu/ nor anything that
    includes jpeglib.h."""
    csrc = tmp_path / "csrc"
    shutil.copytree(PACKAGE / "csrc", csrc)
    rel = {os.path.relpath(p, csrc) for p in config.cuda_sources(str(csrc))}
    expected = {
        os.path.join(d, f.name) for d in ("cuda", "common") for f in (csrc / d).iterdir() if f.suffix in (".cpp", ".cu")
    }
    assert rel == expected and os.path.join("common", "exif_orientation.cpp") in rel
    headers = {os.path.relpath(p, csrc) for p in config.cuda_headers(str(csrc))}
    assert os.path.join("common", "region.h") in headers and os.path.join("cuda", "nvjpeg_context.h") in headers
    assert not any(h.startswith("cpu") for h in headers)
    assert os.path.join("jpeg_core", "huffman.h") in headers  # the CUDA decoder's arithmetic
    for path in config.cuda_sources(str(csrc)) + config.cuda_headers(str(csrc)):
        includes = [line for line in Path(path).read_text().splitlines() if line.lstrip().startswith("#include")]
        assert not any("jpeglib.h" in line or '"cpu/' in line for line in includes), path

    def source_hash():
        return config.cuda_library(_Nvjpeg(), str(csrc)).source_hash()

    before = source_hash()
    with open(csrc / "cpu" / "decode_cpu.cpp", "a") as f:  # the CPU library's own source
        f.write("\n// edited\n")
    assert source_hash() == before
    for shared in (
        csrc / "common" / "region.h",
        csrc / "common" / "exif_orientation.cpp",
        csrc / "cuda" / "window_copy.cu",
    ):
        with open(shared, "a") as f:
            f.write("\n// edited\n")
        after = source_hash()
        assert after != before, shared
        before = after


def test_flags_and_buildinfo():
    assert config.cuda_include_dirs(_Nvjpeg(), "/src") == ["/src", "/nv/include"]
    assert config.cuda_link_flags(_Nvjpeg()) == ["-L/nv/lib", "-l:libnvjpeg.so.13"]
    flags = ["-gencode=arch=compute_90,code=sm_90"]
    library = config.cuda_library(_Nvjpeg())
    info = library.buildinfo("2.11.0+cu130", "13.0", flags)
    assert info["source_hash"] == library.source_hash()
    assert (info["torch_version"], info["torch_cuda"], info["python"]) == ("2.11.0+cu130", "13.0", config.python_tag())
    assert info["cuda_arch_flags"] == flags and info["nvjpeg_library"] == "/nv/lib/libnvjpeg.so.13"
    assert info["compile_flags"] == config.cuda_compile_flags()
    assert library.current("2.11.0+cu130", "13.0").items() <= info.items()


# torch's -gencode flags for TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" and the like.
@pytest.mark.parametrize(
    "flags, capability, runs",
    [
        (["-gencode=arch=compute_90,code=sm_90"], (9, 0), True),
        (["-gencode=arch=compute_90,code=sm_90"], (8, 0), False),
        (["-gencode=arch=compute_90,code=sm_90"], (10, 0), False),  # a cubin does not cross major versions
        (["-gencode=arch=compute_80,code=sm_80"], (8, 6), True),
        (["-gencode=arch=compute_86,code=sm_86"], (8, 0), False),
        (["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90"], (10, 0), True),  # PTX
        (["-gencode=arch=compute_90,code=compute_90"], (8, 9), False),
        (["-gencode=arch=compute_90a,code=sm_90a"], (9, 0), True),
        (["-gencode=arch=compute_100a,code=sm_100a"], (10, 3), False),  # arch-specific: exactly that one
        (["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_120,code=sm_120"], (12, 0), True),
        ([], (9, 0), False),
    ],
)
def test_arch_flags_cover(flags, capability, runs):
    assert config.arch_flags_cover(flags, capability) is runs


# ---------------------------------------------------------------- when a prebuilt library is current


def _place(package_dir, name, info_file, info):
    (package_dir / (name + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"not loaded by this test")
    if info is not None:
        (package_dir / info_file).write_text(json.dumps(info))


def test_prebuilt_library_is_taken_only_when_its_buildinfo_matches(tmp_path):
    current = {"source_hash": "abc", "torch_version": "2.11.0+cu130", "torch_cuda": "13.0", "python": "cp311"}
    logged = []

    def find():
        return config.find_prebuilt(
            config.CUDA_PREBUILT_NAME, config.CUDA_PREBUILT_INFO, current, package_dir=str(tmp_path), log=logged.append
        )

    assert find() is None and logged == []  # nothing there
    _place(tmp_path, config.CUDA_PREBUILT_NAME, config.CUDA_PREBUILT_INFO, None)
    assert find() is None and "no readable" in logged[-1]
    _place(tmp_path, config.CUDA_PREBUILT_NAME, config.CUDA_PREBUILT_INFO, {**current, "nvjpeg_version": "13.0.1"})
    path, info = find()
    assert path.startswith(str(tmp_path / config.CUDA_PREBUILT_NAME)) and info["nvjpeg_version"] == "13.0.1"
    for key in current:
        _place(tmp_path, config.CUDA_PREBUILT_NAME, config.CUDA_PREBUILT_INFO, {**current, key: "other"})
        assert find() is None and logged[-1].endswith(f"built for another {key}")
    # The CPU library's buildinfo does not make the GPU one current, nor the reverse.
    (tmp_path / config.CUDA_PREBUILT_INFO).unlink()
    (tmp_path / config.PREBUILT_INFO).write_text(json.dumps(current))
    assert find() is None


# ---------------------------------------------------------------- setup.py's configuration step


def _setup_version(**env):
    """`python setup.py --version`: runs setup.py's decisions (and prints them), builds nothing."""
    full = {k: v for k, v in os.environ.items() if k not in ("CUSTOM_OP_BUILD_CUDA", "CUSTOM_OP_BUILD_EXT")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=ROOT, env=full, capture_output=True, text=True, timeout=300
    )


needs_cpu_torch = pytest.mark.skipif(
    torch.version.cuda is not None,
    reason=f"torch {torch.__version__} has CUDA here: setup.py may build the "
    "GPU library (bench/device_aot_check.sh checks that case)",
)


@needs_cpu_torch
def test_setup_without_cuda_torch_warns_once_and_still_configures_the_cpu_library():
    r = _setup_version()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "0.1.0"
    warnings = [line for line in r.stderr.splitlines() if "CUDA (nvJPEG) library is not prebuilt" in line]
    assert warnings == [
        f"WARNING: custom_op: the CUDA (nvJPEG) library is not prebuilt: torch {torch.__version__} "
        "in the build environment is built without CUDA. It is built on first use with "
        "device='cuda' instead (CUSTOM_OP_BUILD_CUDA=0 skips it without this warning)."
    ]


@needs_cpu_torch
def test_setup_with_build_cuda_1_fails_saying_why():
    r = _setup_version(CUSTOM_OP_BUILD_CUDA="1")
    assert r.returncode != 0
    assert "CUSTOM_OP_BUILD_CUDA=1 but the CUDA library cannot be built" in r.stderr
    assert "built without CUDA" in r.stderr


def test_setup_with_build_cuda_0_says_nothing_about_it():
    r = _setup_version(CUSTOM_OP_BUILD_CUDA="0")
    assert r.returncode == 0, r.stderr
    assert "CUDA" not in r.stderr


def test_setup_rejects_an_unknown_build_cuda_value():
    r = _setup_version(CUSTOM_OP_BUILD_CUDA="sometimes")
    assert r.returncode != 0 and "expected auto, 0 or 1" in r.stderr
