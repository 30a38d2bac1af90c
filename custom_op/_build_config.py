"""Sources and compiler flags of the C++ extension, shared by setup.py and the JIT build.

setup.py loads this file by path before the package can be imported, so it must
not import torch or anything from the custom_op package.
"""

import hashlib
import json
import os
import sys
import sysconfig
from typing import Iterable, List

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
CSRC_DIR = os.path.join(PACKAGE_DIR, "csrc")

SOURCE_SUFFIXES = (".cpp", ".cc", ".cu")
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".inc")

# The prebuilt CPU library: setup.py builds extension "custom_op._C" and writes
# PREBUILT_INFO next to it, so the loader can tell whether it matches the sources.
PREBUILT_NAME = "_C"
PREBUILT_INFO = "_C.buildinfo.json"
# Directories under csrc/ that belong to other libraries (the future GPU backend).
CPU_EXCLUDED_DIRS = ("cuda",)


def _walk(csrc_dir: str, suffixes: Iterable[str], excluded_dirs: Iterable[str]) -> List[str]:
    suffixes = tuple(suffixes)
    excluded = {os.path.join(csrc_dir, d) for d in excluded_dirs}
    found = []
    for root, dirs, files in os.walk(csrc_dir):
        dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in excluded)
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(suffixes)]
    return found


def cpu_sources(csrc_dir: str = CSRC_DIR) -> List[str]:
    """Absolute paths of the *.cpp files of the CPU library (all of csrc/ except csrc/cuda/)."""
    return _walk(csrc_dir, (".cpp", ".cc"), CPU_EXCLUDED_DIRS)


def cpu_headers(csrc_dir: str = CSRC_DIR) -> List[str]:
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


def cpu_source_hash(csrc_dir: str = CSRC_DIR) -> str:
    return content_hash(cpu_sources(csrc_dir) + cpu_headers(csrc_dir), csrc_dir)


def python_tag() -> str:
    """Interpreter and platform a built library is tied to (cpython-311-linux-x86_64)."""
    return f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"


def compile_flags() -> List[str]:
    # No -std flag: torch adds the standard its headers need (C++20 since torch 2.10)
    # and a later -std=c++17 would override it and break the build.
    return ["-O3"]


def include_dirs(jpeg, csrc_dir: str = CSRC_DIR) -> List[str]:
    return [csrc_dir] + list(jpeg.include_dirs)


def link_flags(jpeg) -> List[str]:
    flags = [f"-L{d}" for d in jpeg.library_dirs]
    flags += [f"-Wl,-rpath,{d}" for d in jpeg.rpath_dirs]
    flags += [f"-l{lib}" for lib in jpeg.libraries]
    return flags


def prebuilt_info(jpeg, torch_version: str, csrc_dir: str = CSRC_DIR) -> dict:
    """What the prebuilt library was made from; the loader compares it with the installed state."""
    return {
        "source_hash": cpu_source_hash(csrc_dir),
        "torch_version": torch_version,
        "python": python_tag(),
        "libjpeg_turbo_version": jpeg.version,
        "compile_flags": compile_flags(),
    }


def write_prebuilt_info(path: str, info: dict) -> None:
    with open(path, "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
