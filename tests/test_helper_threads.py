"""custom_op/csrc/cuda/helper_threads.cpp (ChunkedWork, the per-image host work of a GPU batch shared with
helper threads), tested on the CPU: tests/helper_threads_check.cpp is compiled against torch's c10 (the
pool is a c10::ThreadPool) and runs each case. The GPU tests exercise it inside every batch."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from conftest import ROOT

SOURCES = [ROOT / "tests" / "helper_threads_check.cpp", ROOT / "custom_op" / "csrc" / "cuda" / "helper_threads.cpp"]


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Path:
    cxx = _compiler()
    if cxx is None:
        pytest.skip("no C++ compiler here")
    lib = Path(torch.__file__).parent / "lib"
    exe = tmp_path_factory.mktemp("helper_threads") / "helper_threads_check"
    abi = int(torch.compiled_with_cxx11_abi())
    command = [cxx, "-std=c++17", "-O1", "-g", "-pthread", "-Wall", "-Wextra", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    command += [f"-I{ROOT}", f"-I{ROOT / 'custom_op' / 'csrc'}"] + [f"-I{p}" for p in cpp_extension.include_paths()]
    command += [str(s) for s in SOURCES] + [f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}", "-o", str(exe)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return exe


@pytest.mark.parametrize("case", ["every_image_once", "exception_reaches_the_caller", "destroyed_early", "two_callers"])
def test_chunked_work(check, case):
    result = subprocess.run([str(check), case], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
