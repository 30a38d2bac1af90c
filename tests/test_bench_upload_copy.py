"""bench/bench_upload_copy.py: the host's copy into the upload buffer timed on its own, each way beside memcpy."""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_upload_copy  # noqa: E402


def test_the_copying_threads_are_the_caller_and_the_copy_helpers():
    assert bench_upload_copy.copy_threads() > 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the benchmark")
def test_the_report_has_a_table_per_cache_and_thread_count(tmp_path):
    out = tmp_path / "upload_copy.md"
    assert bench_upload_copy.main(["--file-bytes", "5000", "--cold-mb", "1", "--rounds", "1", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    headings = [b["text"] for b in report["body"] if b["type"] == "heading"]
    threads = bench_upload_copy.copy_threads()
    assert headings == [f"{c}, {n}" for c in ("cold", "warm") for n in ("1 thread", f"{threads} threads")]
    tables = [b for b in report["body"] if b["type"] == "table"]
    for table in tables:
        ways = [row[0] for row in table["rows"]]
        assert ways[0] == "memcpy" and table["rows"][0][2] == "1.00x"
        if platform.machine() == "x86_64":
            assert "streaming32 without prefetch" in ways or "streaming16" in ways
        assert all(n[1] > 0 for n in table["numbers"])
    assert report["details"]["the decoder copies with"] in ("plain", "streaming16", "streaming32")
