"""Locate nvJPEG's header and library for building the GPU backend.

nvJPEG comes with the CUDA toolkit (CUDA_HOME, /usr/local/cuda: include/nvjpeg.h, lib64/libnvjpeg.so)
or in the ``nvidia-nvjpeg`` wheel (nvidia/cu13/include/nvjpeg.h and nvidia/cu13/lib/libnvjpeg.so.13,
with no unversioned library name, so it is linked by its full file name). Imports no torch, so tests
can load it by path.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from typing import NamedTuple, Optional

PREFIX_ENV = "CUSTOM_OP_NVJPEG_PREFIX"

INSTALL_HELP = (
    "nvJPEG ships with the CUDA toolkit (set CUDA_HOME to it) and in the nvidia-nvjpeg wheel "
    "(pip install nvidia-nvjpeg, matching your CUDA major version). For another location set "
    f"{PREFIX_ENV}=<prefix holding include/nvjpeg.h and lib/ or lib64/ with libnvjpeg.so*>."
)

_DEFAULT_LIB_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/lib/x86_64-linux-gnu")


class NvjpegNotFound(RuntimeError):
    pass


class Nvjpeg(NamedTuple):
    prefix: str
    include_dir: str
    library_dir: str
    library_file: str  # the file linked against: libnvjpeg.so or libnvjpeg.so.<major>
    version: str  # from nvjpeg.h
    rpath_dirs: list[str]

    def link_flags(self) -> list[str]:
        name = self.library_file
        lib = "-lnvjpeg" if name == "libnvjpeg.so" else f"-l:{name}"
        return [f"-L{self.library_dir}"] + [f"-Wl,-rpath,{d}" for d in self.rpath_dirs] + [lib]


def _header_version(header: str) -> Optional[str]:
    try:
        with open(header, encoding="latin-1") as f:
            text = f.read()
    except OSError:
        return None
    parts = [re.search(rf"#\s*define\s+NVJPEG_VER_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "unknown"


def _library_in(directory: str, major: Optional[str]) -> Optional[str]:
    if os.path.exists(os.path.join(directory, "libnvjpeg.so")):
        return "libnvjpeg.so"
    versioned = sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, "libnvjpeg.so.*")))
    exact = [v for v in versioned if major and v == f"libnvjpeg.so.{major}"]
    if exact:
        return exact[0]
    short = [v for v in versioned if re.fullmatch(r"libnvjpeg\.so\.\d+", v)]
    return short[0] if short else None


def _probe(prefix: str) -> tuple[Optional[Nvjpeg], str]:
    includes = [os.path.join(prefix, "include"), os.path.join(prefix, "targets", "x86_64-linux", "include")]
    include = next((d for d in includes if os.path.isfile(os.path.join(d, "nvjpeg.h"))), None)
    if include is None:
        return None, f"{prefix}: no include/nvjpeg.h"
    version = _header_version(os.path.join(include, "nvjpeg.h")) or "unknown"
    major = version.split(".")[0] if version[0].isdigit() else None
    libs = [os.path.join(prefix, d) for d in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib"))]
    for directory in libs:
        name = _library_in(directory, major)
        if name is not None:
            real = os.path.realpath(directory)
            rpath = [] if real in {os.path.realpath(d) for d in _DEFAULT_LIB_DIRS} else [directory]
            return Nvjpeg(prefix, include, directory, name, version, rpath), ""
    return None, f"{prefix}: nvjpeg.h {version} found but no libnvjpeg.so* under lib64/ or lib/"


def _wheel_prefixes() -> list[str]:
    # The nvidia-* wheels share the namespace package "nvidia"; nvJPEG sits in cu13/ (CUDA 13 wheels)
    # or nvjpeg/ (CUDA 12 wheels). Found without importing it, by walking sys.path.
    import sys

    found = []
    for entry in sys.path:
        base = os.path.join(entry or ".", "nvidia")
        for sub in ("cu13", "cu12", "nvjpeg"):
            path = os.path.join(base, sub)
            if os.path.isdir(path) and path not in found:
                found.append(path)
    return found


def candidate_prefixes(cuda_home: Optional[str] = None) -> list[str]:
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.environ[var])
    if cuda_home:
        candidates.append(cuda_home)
    candidates.append("/usr/local/cuda")
    candidates += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    candidates += _wheel_prefixes()
    candidates.append("/usr")
    unique = []
    for c in candidates:
        if c not in unique:
            unique.append(c)
    return unique


def find_nvjpeg(cuda_home: Optional[str] = None, prefixes: Optional[Sequence[str]] = None) -> Nvjpeg:
    """The first place holding nvjpeg.h and libnvjpeg.so*; $CUSTOM_OP_NVJPEG_PREFIX wins when set."""
    explicit = os.environ.get(PREFIX_ENV)
    if explicit:
        found, reason = _probe(os.path.abspath(os.path.expanduser(explicit)))
        if found:
            return found
        raise NvjpegNotFound(f"custom_op: {PREFIX_ENV}={explicit} does not hold nvJPEG ({reason}). {INSTALL_HELP}")
    searched = []
    for prefix in list(prefixes or []) + candidate_prefixes(cuda_home):
        found, reason = _probe(prefix)
        if found:
            return found
        searched.append(reason)
    raise NvjpegNotFound(
        "custom_op: nvJPEG (nvjpeg.h and libnvjpeg.so) was not found. Searched:\n"
        + "\n".join("  - " + r for r in searched)
        + "\n"
        + INSTALL_HELP
    )


if __name__ == "__main__":
    print(find_nvjpeg())
