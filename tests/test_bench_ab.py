"""bench/bench_ab.py, on the CPU with generated photos: each checkout's worker imports that checkout's
custom_op, the rounds of both are reported, and a name that is neither a checkout nor a revision is
refused in words."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jpeg_factory

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "bench_ab.py"

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None,
    reason=f"the generated photos need the test JPEG writer: {jpeg_factory.unavailable_reason()}",
)


def run(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def package_copy(checkout: Path) -> Path:
    """checkout/custom_op: a copy of this checkout's package sources, without its builds."""
    ignore = shutil.ignore_patterns("*.so", "_C.*", "__pycache__")
    shutil.copytree(ROOT / "custom_op", checkout / "custom_op", ignore=ignore)
    return checkout


def test_two_checkouts_each_with_its_own_custom_op(tmp_path):
    # B: a copy of this checkout's package, outside any repository (the same sources, so the same build).
    copy = package_copy(tmp_path / "copy")
    out = tmp_path / "ab.md"
    options = ["--device", "cpu", "--imagenet", tmp_path / "none", "--photos", 6, "--batches", "3,5"]
    result = run(ROOT, copy, *options, "--rounds", 3, "--calls", 2, "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["commit"].endswith(f"B: not a git checkout ({copy.resolve()})"), report["commit"]
    assert report["details"]["photos"] == "6 generated"
    imported_a, imported_b = report["details"]["custom_op imported"].split("; ")
    assert imported_a == f"A: {ROOT / 'custom_op' / '__init__.py'}"
    assert imported_b == f"B: {copy.resolve() / 'custom_op' / '__init__.py'}"
    body = report["body"]
    assert body[0] == {"type": "text", "text": "windows identical in A and B: True"}
    table = body[1]
    assert [row[0] for row in table["rows"]] == ["batch 3, ordinary memory", "batch 5, ordinary memory"]
    for row, numbers in zip(table["rows"], table["numbers"]):
        a, b, ratio, paired, a_cpu, b_cpu, paired_cpu = numbers[1:]
        assert a > 0 and b > 0 and a_cpu > 0 and b_cpu > 0
        # B / A is of the medians before the table rounds them to whole images/s and it to 3 decimals.
        assert abs(ratio - b / a) <= 0.0005 + (b / a) * (0.5 / a + 0.5 / b) + 1e-9
        # The paired ratios: a median within its range, of 3 pairs of rounds.
        for text, median in ((row[4], paired), (row[7], paired_cpu)):
            low, high = (float(v) for v in text.split("(")[1].rstrip(")").split("-"))
            assert 0 < low <= median <= high, text


def test_calls_through_decode_ahead(tmp_path):
    out = tmp_path / "ab.md"
    options = ["--device", "cpu", "--imagenet", tmp_path / "none", "--photos", 4, "--batches", "2"]
    result = run(ROOT, ROOT, *options, "--rounds", 2, "--calls", 3, "--ahead", 2, "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert "3 calls per row, through custom_op.decode_ahead, 2 at once" in report["details"]["each figure"]
    assert all(n > 0 for n in report["body"][1]["numbers"][0][1:])


def test_ahead_needs_decode_ahead_in_both_checkouts(tmp_path):
    """A checkout from before decode_ahead is refused in words."""
    copy = package_copy(tmp_path / "old")
    init = copy / "custom_op" / "__init__.py"
    init.write_text(init.read_text().replace("from .decode_ahead import decode_ahead  # noqa: E402\n", ""))
    options = ["--device", "cpu", "--imagenet", tmp_path / "none", "--photos", 2, "--batches", "2", "--ahead", 2]
    result = run(ROOT, copy, *options, "--rounds", 1, "--calls", 1)
    assert result.returncode != 0
    assert "--ahead needs custom_op.decode_ahead, which" in result.stderr


def test_a_name_that_is_no_checkout_is_refused(tmp_path):
    result = run("no-such-revision-anywhere", ROOT, "--device", "cpu", "--imagenet", tmp_path)
    assert result.returncode != 0
    assert "no-such-revision-anywhere is neither a checkout directory nor a revision" in result.stderr


def test_pinned_memory_needs_cuda():
    result = run(ROOT, ROOT, "--device", "cpu", "--memory", "pinned")
    assert result.returncode == 2 and "--memory pinned needs a CUDA device" in result.stderr
