"""custom_op/csrc/cuda/helper_threads.cpp (ChunkedWork, the per-image host work of a GPU batch shared with
helper threads), tested on the CPU: tests/helper_threads_check.cpp is compiled against torch's c10 (the
pool is a c10::ThreadPool) and runs each case. The GPU tests exercise it inside every batch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

import host_checks
from conftest import ROOT

SOURCES = [ROOT / "tests" / "helper_threads_check.cpp", ROOT / "custom_op" / "csrc" / "cuda" / "helper_threads.cpp"]


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Path:
    lib = Path(torch.__file__).parent / "lib"
    abi = int(torch.compiled_with_cxx11_abi())
    flags = ["-O1", "-g", "-pthread", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{ROOT}"]
    flags += [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = [f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}"]
    return host_checks.build(tmp_path_factory.mktemp("helper_threads"), "helper_threads_check", SOURCES, flags, libs)


@pytest.mark.parametrize(
    "case", ["every_image_once", "helpers_bounded", "exception_reaches_the_caller", "destroyed_early", "two_callers"]
)
def test_chunked_work(check, case):
    result = subprocess.run([str(check), case], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
