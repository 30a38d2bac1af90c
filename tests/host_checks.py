"""Builds the small C++ programs with which tests drive host code of the GPU library on the CPU
(tests/*_check.cpp, compiled with the sources they test)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

CSRC = ROOT / "custom_op" / "csrc"

#: The GPU library's header reader (cuda/jpeg_header.h) and the sources it links with.
HEADER_READER = [
    CSRC / "cuda" / "jpeg_header.cpp",
    CSRC / "common" / "segment_index.cpp",
    CSRC / "common" / "restart_plan.cpp",
    CSRC / "common" / "exif_orientation.cpp",
]


def compiler() -> str | None:
    """$CXX, else the first C++ compiler on PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def build(directory: Path, name: str, sources: list[Path], flags: list[str] = (), libs: list[str] = ()) -> Path:
    """Compiles `sources` (C++17, -Wall -Wextra, csrc/ on the include path) into directory/name;
    skips the test where there is no compiler."""
    cxx = compiler()
    if cxx is None:
        pytest.skip("no C++ compiler here")
    exe = directory / name
    command = [cxx, "-std=c++17", "-Wall", "-Wextra", *flags, f"-I{CSRC}", *map(str, sources), *libs, "-o", str(exe)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return exe
