"""Sources and compiler flags of the C++ libraries (CPU, and GPU with nvJPEG), shared by setup.py and
the JIT build, and what decides whether a prebuilt one is current and whether setup.py builds the GPU one.

setup.py loads this file by path before the package can be imported, so it must
not import torch or anything from the custom_op package.
"""

import hashlib
import importlib.machinery
import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable, Optional

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
CSRC_DIR = os.path.join(PACKAGE_DIR, "csrc")

SOURCE_SUFFIXES = (".cpp", ".cc", ".cu")
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".inc")

# The prebuilt CPU library: setup.py builds extension "custom_op._C" and writes
# PREBUILT_INFO next to it, so the loader can tell whether it matches the sources.
PREBUILT_NAME = "_C"
PREBUILT_INFO = "_C.buildinfo.json"
# Directories under csrc/ that belong to other libraries (the GPU backend).
CPU_EXCLUDED_DIRS = ("cuda",)

# The prebuilt GPU library (nvJPEG): setup.py builds "custom_op._C_cuda" when it can, with its own
# buildinfo; the JIT build (gpu.py) compiles the same sources with the same flags otherwise.
CUDA_PREBUILT_NAME = "_C_cuda"
CUDA_PREBUILT_INFO = "_C_cuda.buildinfo.json"
CUDA_DIR = "cuda"
# Code both libraries compile (the EXIF reader, so both orient images identically; the restart-segment
# plans, so that our CUDA decoder reads whatever the CPU path reads) and the types they share; it
# includes neither jpeglib.h nor nvjpeg.h.
COMMON_DIR = "common"
# Our CUDA decoder's arithmetic: header-only __host__ __device__ code that the GPU library's kernels
# include (and tests/jpeg_core_harness.cpp compiles for the CPU).
JPEG_CORE_DIR = "jpeg_core"
BUILD_CUDA_ENV = "CUSTOM_OP_BUILD_CUDA"

CPU_LIBRARY = "custom_op_cpu"
CUDA_LIBRARY = "custom_op_cuda"

# The CPU library is built on torch's stable ABI (torch/csrc/stable/), targeting this version: the
# oldest whose stable ABI has what the library uses (list arguments and returns, std::string,
# parallel_for). One build serves every torch from it on. The GPU library needs what the stable ABI
# lacks (CUDA streams, the caching allocator: see docs/guides/install.md) and is built against one
# torch's C++ ABI, serving that torch only.
STABLE_ABI_TARGET = (2, 10)


@dataclass(frozen=True)
class Library:
    """How one C++ library is built, and how a built one is recognised: setup.py prebuilds it from
    this description and the just-in-time build (_build.load) compiles the same."""

    jit_name: str  # file name (without .so) in the just-in-time cache
    prebuilt_name: str  # setup.py's extension: custom_op/<prebuilt_name>*.so
    prebuilt_info: str  # the buildinfo json setup.py writes beside it
    sources: tuple[str, ...]
    headers: tuple[str, ...]
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    key_extra: tuple[str, ...]  # what else the build depends on (the versions and places of libraries)
    with_cuda: bool
    facts: tuple[tuple[str, str], ...] = ()  # recorded in the buildinfo, not compared (versions, paths)
    csrc_dir: str = CSRC_DIR
    # For a library on torch's stable ABI, the version it targets ("2.10"): a build serves that torch
    # and every later one. None for one built against a torch's C++ ABI, which serves that torch only.
    stable_abi: Optional[str] = None

    def source_hash(self) -> str:
        return content_hash(list(self.sources) + list(self.headers), self.csrc_dir)

    def current(self, torch_version: str, torch_cuda: Optional[str]) -> dict[str, str]:
        """What a prebuilt library's buildinfo must say to be loaded in place of a build (under a torch
        that the library serves at all: see unserved_reason)."""
        current = {"source_hash": self.source_hash(), "python": python_tag()}
        if self.stable_abi:
            current["stable_abi"] = self.stable_abi
        else:
            current["torch_version"] = torch_version
        if self.with_cuda:
            current["torch_cuda"] = torch_cuda
        return current

    def unserved_reason(self, torch_version: str) -> Optional[str]:
        """Why no build of this library can serve this torch (None when one can): a torch older than
        the stable ABI version the library targets."""
        if self.stable_abi and release(torch_version) < release(self.stable_abi):
            return f"custom_op needs torch >= {self.stable_abi}; torch {torch_version} is installed (upgrade torch)"
        return None

    def buildinfo(self, torch_version: str, torch_cuda: Optional[str] = None, arch_flags: Iterable[str] = ()) -> dict:
        """What setup.py records beside the prebuilt library: what the loader compares (current), and
        facts it does not (the torch a stable-ABI library was compiled with, the flags, versions)."""
        info = {
            "torch_version": torch_version,
            **self.current(torch_version, torch_cuda),
            **dict(self.facts),
            "compile_flags": list(self.cflags),
        }
        if self.with_cuda:
            info["cuda_arch_flags"] = list(arch_flags)
        return info


def release(version: str) -> tuple[int, ...]:
    """(major, minor) of a torch version string: "2.14.1+cu130" -> (2, 14); "2.10" -> (2, 10)."""
    numbers = re.match(r"(\d+)\.(\d+)", version)
    if numbers is None:
        raise ValueError(f"custom_op: cannot read a torch version from {version!r}")
    return int(numbers.group(1)), int(numbers.group(2))


def cpu_library(jpeg, csrc_dir: str = CSRC_DIR) -> Library:
    """The CPU library (libjpeg-turbo): every source under csrc/ but csrc/cuda/."""
    return Library(
        jit_name=CPU_LIBRARY,
        prebuilt_name=PREBUILT_NAME,
        prebuilt_info=PREBUILT_INFO,
        sources=tuple(cpu_sources(csrc_dir)),
        headers=tuple(cpu_headers(csrc_dir)),
        cflags=tuple(compile_flags()),
        ldflags=tuple(link_flags(jpeg)),
        include_dirs=tuple(include_dirs(jpeg, csrc_dir)),
        key_extra=(f"libjpeg-turbo {jpeg.version} {jpeg.prefix}",),
        with_cuda=False,
        facts=(("libjpeg_turbo_version", jpeg.version),),
        csrc_dir=csrc_dir,
        stable_abi="{}.{}".format(*STABLE_ABI_TARGET),
    )


def cuda_library(nvjpeg, csrc_dir: str = CSRC_DIR) -> Library:
    """The GPU library (nvJPEG and our kernels): csrc/cuda/ and csrc/common/. It reaches the CPU
    decoder through the dispatcher, so it needs neither libjpeg's headers nor its library."""
    nvjpeg_file = os.path.join(nvjpeg.library_dir, nvjpeg.library_file)
    return Library(
        jit_name=CUDA_LIBRARY,
        prebuilt_name=CUDA_PREBUILT_NAME,
        prebuilt_info=CUDA_PREBUILT_INFO,
        sources=tuple(cuda_sources(csrc_dir)),
        headers=tuple(cuda_headers(csrc_dir)),
        cflags=tuple(cuda_compile_flags()),
        ldflags=tuple(cuda_link_flags(nvjpeg)),
        include_dirs=tuple(cuda_include_dirs(nvjpeg, csrc_dir)),
        key_extra=(f"nvjpeg {nvjpeg.version} {nvjpeg_file}",),
        with_cuda=True,
        facts=(("nvjpeg_version", nvjpeg.version), ("nvjpeg_library", nvjpeg_file)),
        csrc_dir=csrc_dir,
    )


def _walk(csrc_dir: str, suffixes: Iterable[str], excluded_dirs: Iterable[str]) -> list[str]:
    suffixes = tuple(suffixes)
    excluded = {os.path.join(csrc_dir, d) for d in excluded_dirs}
    found = []
    for root, dirs, files in os.walk(csrc_dir):
        dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in excluded)
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(suffixes)]
    return found


def cpu_sources(csrc_dir: str = CSRC_DIR) -> list[str]:
    """Absolute paths of the *.cpp files of the CPU library (all of csrc/ except csrc/cuda/)."""
    return _walk(csrc_dir, (".cpp", ".cc"), CPU_EXCLUDED_DIRS)


def cpu_headers(csrc_dir: str = CSRC_DIR) -> list[str]:
    return _walk(csrc_dir, HEADER_SUFFIXES, CPU_EXCLUDED_DIRS)


def content_hash(files: Iterable[str], base_dir: str = CSRC_DIR) -> str:
    """sha256 of the files' paths (relative to base_dir) and contents."""
    h = hashlib.sha256()
    for path in sorted(files, key=lambda p: os.path.relpath(p, base_dir)):
        h.update(os.path.relpath(path, base_dir).replace(os.sep, "/").encode())
        h.update(b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def python_tag() -> str:
    """Interpreter and platform a built library is tied to (cpython-311-linux-x86_64)."""
    return f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"


def compile_flags() -> list[str]:
    """The CPU library's flags. No -std flag: torch adds the standard its headers need (C++20 since
    torch 2.10) and a later -std=c++17 would override it and break the build. No OpenMP flag either:
    torch::stable::parallel_for runs in libtorch's pool. Hidden symbols: nothing is looked up in the
    library (its operators register themselves as it loads), and torch's stable headers hide their
    inline code so that extensions built with other torch headers never share it; ours is hidden too."""
    major, minor = STABLE_ABI_TARGET
    return ["-O3", "-fvisibility=hidden", f"-DTORCH_TARGET_VERSION=0x{major:02x}{minor:02x}000000000000"]


def include_dirs(jpeg, csrc_dir: str = CSRC_DIR) -> list[str]:
    return [csrc_dir] + list(jpeg.include_dirs)


def link_flags(jpeg) -> list[str]:
    flags = [f"-L{d}" for d in jpeg.library_dirs]
    flags += [f"-Wl,-rpath,{d}" for d in jpeg.rpath_dirs]
    flags += [_library_argument(lib, jpeg.library_dirs) for lib in jpeg.libraries]
    return flags


def _library_argument(name: str, library_dirs: list[str]) -> str:
    # The library file itself where it is found: setuptools puts Python's own LIBDIR (often
    # /usr/lib/x86_64-linux-gnu, where a system libjpeg lives) before our -L, so a plain -ljpeg could
    # link a different libjpeg than the one whose headers were compiled against (seen on Ubuntu with
    # CUSTOM_OP_JPEG_PREFIX: libjpeg 8 linked, libjpeg 6.2 headers, and every decoder failed to start).
    for directory in library_dirs:
        for suffix in (".so", ".dylib"):
            path = os.path.join(directory, f"lib{name}{suffix}")
            if os.path.exists(path):
                return path
    return f"-l{name}"


def find_prebuilt(
    name: str,
    info_file: str,
    current: dict,
    package_dir: str = PACKAGE_DIR,
    log: Optional[Callable[[str], None]] = None,
) -> Optional[tuple[str, dict]]:
    """(path, buildinfo) of library `name` that setup.py put in package_dir, if its buildinfo matches
    every entry of `current` (sources hash, torch, Python, ...); else None, saying why to `log`."""
    path = next(
        (
            os.path.join(package_dir, name + suffix)
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if os.path.isfile(os.path.join(package_dir, name + suffix))
        ),
        None,
    )
    if path is None:
        return None
    info_path = os.path.join(package_dir, info_file)
    try:
        with open(info_path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        info = None
    if not isinstance(info, dict):
        if log:
            log(f"ignoring prebuilt {path}: no readable {info_path}")
        return None
    stale = [k for k, v in current.items() if info.get(k) != v]
    if stale:
        if log:
            log(f"ignoring prebuilt {path}: it was built for another {', '.join(stale)}")
        return None
    return path, info


def write_prebuilt_info(path: str, info: dict) -> None:
    with open(path, "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------- the GPU (nvJPEG) library


def cuda_sources(csrc_dir: str = CSRC_DIR) -> list[str]:
    """csrc/cuda/*.cpp and *.cu, and the shared sources of csrc/common/."""
    found = []
    for sub in (CUDA_DIR, COMMON_DIR):
        d = os.path.join(csrc_dir, sub)
        if os.path.isdir(d):
            found += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(SOURCE_SUFFIXES))
    return found


def cuda_headers(csrc_dir: str = CSRC_DIR) -> list[str]:
    found = []
    for sub in (CUDA_DIR, COMMON_DIR, JPEG_CORE_DIR):
        d = os.path.join(csrc_dir, sub)
        if os.path.isdir(d):
            found += [os.path.join(d, f) for f in os.listdir(d) if f.endswith(HEADER_SUFFIXES)]
    return sorted(found)


def cuda_compile_flags() -> list[str]:
    """Host compiler flags; nvcc gets torch's defaults only, in the JIT build and in setup.py alike."""
    return ["-O3"]


def cuda_include_dirs(nvjpeg, csrc_dir: str = CSRC_DIR) -> list[str]:
    return [csrc_dir, nvjpeg.include_dir]


def cuda_link_flags(nvjpeg) -> list[str]:
    return nvjpeg.link_flags()


_GENCODE = re.compile(r"code=(sm|compute)_(\d+)([a-z]?)")


def arch_flags_cover(arch_flags: Iterable[str], capability: tuple[int, int]) -> bool:
    """Whether code compiled with these nvcc -gencode flags runs on a GPU of this compute capability.

    A cubin (code=sm_XY) runs on the same major version with an equal or higher minor one; PTX
    (code=compute_XY) is compiled by the driver for any capability of at least X.Y. Arch-specific
    targets (sm_90a, ...) count only for exactly their capability.
    """
    major, minor = capability
    for flag in arch_flags:
        for kind, number, suffix in _GENCODE.findall(flag):
            n = int(number)
            arch = (n // 10, n % 10)
            if suffix:
                ok = arch == (major, minor)
            elif kind == "sm":
                ok = arch[0] == major and arch[1] <= minor
            else:
                ok = arch <= (major, minor)
            if ok:
                return True
    return False


def parse_build_mode(raw: Optional[str], var: str = BUILD_CUDA_ENV) -> str:
    """ "auto", "0" or "1" from the env var's value (unset or empty: auto)."""
    value = (raw or "auto").strip().lower()
    if value in ("0", "no", "false", "off"):
        return "0"
    if value in ("1", "yes", "true", "on"):
        return "1"
    if value == "auto":
        return "auto"
    raise ValueError(f"custom_op: {var}={raw!r}: expected auto, 0 or 1")


def cuda_unbuildable_reason(
    torch_version: Optional[str],
    torch_cuda: Optional[str],
    nvcc: Optional[str],
    nvjpeg_error: Optional[str],
    arch_list: Optional[str],
    visible_gpus: int,
) -> Optional[str]:
    """Why the GPU library cannot be prebuilt with these facts of the build environment (None: it can).

    torch_version is None when torch cannot be imported; nvcc is the compiler's path, None when the
    CUDA toolkit was not found; nvjpeg_error is that of finding nvJPEG.
    """
    if torch_version is None:
        return (
            "torch is not importable in the build environment (install torch, then pip install --no-build-isolation .)"
        )
    if not torch_cuda:
        return f"torch {torch_version} in the build environment is built without CUDA"
    if not nvcc:
        return "the CUDA compiler nvcc was not found (set CUDA_HOME to the CUDA toolkit)"
    if nvjpeg_error:
        return _first_sentence(nvjpeg_error) + " (python custom_op/_nvjpeg_paths.py shows where it looked)"
    if not arch_list and visible_gpus == 0:
        return (
            "no GPU is visible to pick the architectures to compile for: set TORCH_CUDA_ARCH_LIST "
            "(for example 9.0 for H100)"
        )
    return None


def _first_sentence(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    if line.startswith("custom_op: "):
        line = line[len("custom_op: ") :]
    return line.split(". ")[0].rstrip(".:")


def decide_cuda_build(mode: str, reason: Optional[str]) -> tuple[str, Optional[str]]:
    """("build", None), ("skip", warning line or None) or ("error", message) for setup.py."""
    if mode == "0":
        return "skip", None
    if reason is None:
        return "build", None
    if mode == "1":
        return "error", f"custom_op: {BUILD_CUDA_ENV}=1 but the CUDA library cannot be built: {reason}"
    return "skip", (
        f"WARNING: custom_op: the CUDA (nvJPEG) library is not prebuilt: {reason}. It is built on "
        f"first use with device='cuda' instead ({BUILD_CUDA_ENV}=0 skips it without this warning)."
    )
