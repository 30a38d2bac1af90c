"""custom_op/csrc/cuda/decode_runs.h (how each thread of our CUDA decoder's decode launch finds the
segment it decodes among the runs of segments the host lists), tested on the CPU:
tests/decode_runs_check.cpp compiles the very function the kernel runs and prints the run it finds
for every task, which must be the run that holds the task when the runs are laid end to end."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

import host_checks
from conftest import ROOT

SOURCES = [ROOT / "tests" / "decode_runs_check.cpp"]


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Path:
    return host_checks.build(tmp_path_factory.mktemp("decode_runs"), "decode_runs_check", SOURCES, ["-O2"])


def expected(counts: list[int]) -> list[int]:
    return [run for run, count in enumerate(counts) for _ in range(count)]


def found(check: Path, counts: list[int]) -> list[int]:
    result = subprocess.run([str(check), *map(str, counts)], capture_output=True, text=True, timeout=60, check=True)
    return [int(v) for v in result.stdout.split()]


@pytest.mark.parametrize(
    "counts",
    [[1], [7], [1, 1], [1, 1, 1, 1, 1], [3, 1], [1, 3], [5, 2, 9, 1, 1, 4], [2] * 33, [64] * 3 + [1]],
)
def test_every_task_finds_its_run(check, counts):
    assert found(check, counts) == expected(counts)


@pytest.mark.parametrize("seed", range(4))
def test_random_runs(check, seed):
    """Run lists shaped like a part's: up to a few hundred runs of 1 to 40 segments."""
    rng = random.Random(seed)
    counts = [rng.randint(1, 40) for _ in range(rng.randint(1, 300))]
    assert found(check, counts) == expected(counts)
