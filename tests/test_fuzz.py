"""Seeded fuzzing of the decoder, and leak checks, each in a child process (tests/fuzz_worker.py).

Every mutated input must give a uint8 tensor of the right shape or ValueError / RuntimeError; a crash
or a hang of the child fails the test with the base, seed and index that rebuild the input
(fuzz_corpus.variant), and the input is saved next to the test's tmp_path for a repro.

CUSTOM_OP_FUZZ_SEED and CUSTOM_OP_FUZZ_COUNT (variants per base file) make longer or different runs;
tests/fuzz/README.md describes the open-ended libFuzzer (atheris) harness, which is not run here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import custom_op
import fuzz_corpus
import jpeg_factory

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None, reason=str(jpeg_factory.unavailable_reason())
)

WORKER = Path(__file__).with_name("fuzz_worker.py")
SEED = int(os.environ.get("CUSTOM_OP_FUZZ_SEED", "0"))
COUNT = int(os.environ.get("CUSTOM_OP_FUZZ_COUNT", "1200"))
GROUPS = 4
# Whole-child limit: a hang guard, far above the normal run time (a few seconds to ~20 s per group).
CHILD_TIMEOUT_S = 600
LEAK_CALLS = 20000
LEAK_BOUND_MB = 20


def _child_env() -> dict:
    # The child must import the same custom_op as this process, installed or from the checkout.
    package_parent = str(Path(custom_op.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    return env


def _run_worker(args, timeout=CHILD_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=timeout, env=_child_env()
        )
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        last = [line for line in out.splitlines() if line.startswith("CASE ")][-1:] or ["(none)"]
        pytest.fail(f"fuzz child hung for {timeout}s; last case started: {last[0]}")


def _base_groups():
    names = fuzz_corpus.base_names() if jpeg_factory.unavailable_reason() is None else []
    return [names[i::GROUPS] for i in range(GROUPS)]


@pytest.mark.parametrize("bases", _base_groups(), ids=lambda names: "+".join(n[:12] for n in names[:3]) + "...")
def test_fuzz_outcomes_are_tensor_or_value_or_runtime_error(bases, tmp_path):
    result = _run_worker(["fuzz", "--bases", ",".join(bases), "--seed", str(SEED), "--count", str(COUNT)])
    lines = result.stdout.splitlines()
    summary = [json.loads(line[len("SUMMARY ") :]) for line in lines if line.startswith("SUMMARY ")]
    if result.returncode != 0 or not summary:
        cases = [line for line in lines if line.startswith("CASE ")]
        detail = f"exit status {result.returncode}"
        if result.returncode < 0:
            detail += f" (killed by signal {-result.returncode})"
        if "Timeout (" in result.stderr:
            detail += " (a case ran past the per-case hang limit)"
        repro = ""
        if cases:
            name, seed, index = cases[-1].split()[1:4]
            data = fuzz_corpus.base(name) if int(index) < 0 else fuzz_corpus.variant(name, int(seed), int(index))[1]
            saved = tmp_path / f"crash-{name}-{seed}-{index}.jpg"
            saved.write_bytes(data)
            repro = f"\ninput saved to {saved} (rebuild: fuzz_corpus.variant({name!r}, {seed}, {index}))"
        pytest.fail(
            f"fuzz child died: {detail}; last case started: {cases[-1] if cases else '(none)'}{repro}\n"
            f"stderr tail:\n{result.stderr[-3000:]}"
        )
    bad = [line for line in lines if line.startswith("BAD ")]
    assert not bad, f"{len(bad)} contract violations (first 30):\n" + "\n".join(bad[:30])
    assert summary[0]["cases"] == len(bases) * (COUNT + 1)
    # Mutated scans make our entropy decoder give up (and libjpeg's decode them, compared above).
    assert summary[0]["entropy_decoder_give_ups"] > 0


def test_hostile_inputs_from_several_threads():
    result = _run_worker(["threads", "--seed", str(SEED + 1), "--count", "100", "--threads", "4"])
    assert result.returncode == 0, f"exit status {result.returncode}\n{result.stderr[-3000:]}"
    bad = [line for line in result.stdout.splitlines() if line.startswith("BAD ")]
    assert not bad, "\n".join(bad[:30])


@pytest.mark.parametrize("kind", ["failing", "succeeding"])
def test_resident_memory_stays_flat_over_many_calls(kind):
    result = _run_worker(["leak", "--kind", kind, "--calls", str(LEAK_CALLS)])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("SUMMARY "))[8:])
    growth = summary["growth_mb"]
    assert max(growth) < LEAK_BOUND_MB, f"RSS grew by {growth} MB over {LEAK_CALLS} {kind} calls"
