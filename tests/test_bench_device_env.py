"""bench/device_env.sh's helpers for the GPU scripts that pick the chunked decode's kernels out of a profile
(bench/gpu_phases_ab.sh, bench/gpu_kernels_ncu.sh): they read the kernels and the rounds from a checkout's
source, so that a kernel added or renamed on a branch is timed without editing the scripts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import jpeg_core_build as core

ROOT = Path(__file__).resolve().parent.parent
DECODER = Path("custom_op/csrc/cuda/segment_decoder.cu")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _helpers(tree: Path | None = None) -> tuple[str, int]:
    """(chunked_kernels, chunked_launches) of `tree` (default: this checkout), as the scripts call them."""
    arg = f' "{tree}"' if tree else ""
    script = f". bench/device_env.sh && chunked_kernels{arg} && chunked_launches{arg}"
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    kernels, launches = out.split()
    return kernels, int(launches)


def _launched(source: str) -> list[str]:
    """The kernels launch_decode_chunks launches, in its order (a kernel in a loop once)."""
    body = source[source.index("cudaError_t launch_decode_chunks(") :]
    body = body[: body.index("\n}\n")]
    return re.findall(r"(\w+)_kernel<<<", body)


def test_the_kernels_are_those_the_chunked_launch_makes():
    source = (ROOT / DECODER).read_text()
    kernels, launches = _helpers()
    launched = _launched(source)
    assert sorted(kernels.split("|")) == sorted(launched)
    assert launches == len(launched) + core.gpu_constant(core.GPU_DECODER, "kSyncRounds") - 1


def test_a_kernel_added_on_a_branch_is_picked_up(tmp_path):
    source = (ROOT / DECODER).read_text()
    changed = source.replace(
        "__global__ void chunk_starts_kernel(",
        "__global__ void count_chunks_kernel() {}\n__global__ void chunk_starts_kernel(",
    )
    changed = re.sub(r"constexpr int kSyncRounds = \d+;", "constexpr int kSyncRounds = 5;", changed)
    assert changed.count("count_chunks_kernel") == 1 and "kSyncRounds = 5;" in changed
    (tmp_path / DECODER).parent.mkdir(parents=True)
    (tmp_path / DECODER).write_text(changed)
    kernels, launches = _helpers(tmp_path)
    base_kernels, base_launches = _helpers()
    assert set(kernels.split("|")) == set(base_kernels.split("|")) | {"count_chunks"}
    assert launches == base_launches + 1 + (5 - core.gpu_constant(core.GPU_DECODER, "kSyncRounds"))
