"""custom_op/csrc/cuda/upload_copy.cpp (the host's copy of files in ordinary memory into our CUDA
decoder's upload buffer), tested on the CPU: tests/upload_copy_check.cpp copies every size up to
1,000 bytes and larger ones, at aligned and unaligned destinations, with each way of copying this
host offers, and checks every byte. The GPU tests exercise the copy inside every batch whose files
lie in ordinary memory."""

from __future__ import annotations

import platform
import subprocess

import pytest

import host_checks
from conftest import ROOT

SOURCES = [ROOT / "tests" / "upload_copy_check.cpp", ROOT / "custom_op" / "csrc" / "cuda" / "upload_copy.cpp"]


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> subprocess.CompletedProcess:
    exe = host_checks.build(tmp_path_factory.mktemp("upload_copy"), "upload_copy_check", SOURCES, ["-O2"])
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)


def test_every_way_copies_every_byte(result):
    assert result.returncode == 0, result.stdout + result.stderr


def test_streaming_stores_on_x86(result):
    """On x86-64 the copy uses streaming stores (SSE2 at least, which every such CPU has), and every
    way it may use was among those checked."""
    checked, used = result.stdout.strip().splitlines()
    assert used.startswith("used: ")
    used = used.removeprefix("used: ")
    assert used in checked.split()
    if platform.machine() in ("x86_64", "AMD64"):
        assert "streaming16" in checked.split()
        assert used != "plain"
