"""bench/bench_loader_transfer.py runs end to end on photos it generates and writes its report: a row
per batch size and way of moving the files, each with the main process's and the workers' CPU time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_report_has_a_row_per_batch_and_way(tmp_path):
    out = tmp_path / "loader_transfer.md"
    command = [sys.executable, str(ROOT / "bench" / "bench_loader_transfer.py"), "--imagenet", str(tmp_path / "none")]
    command += ["--photos", "6", "--batches", "4", "8", "--workers", "1", "--count", "3", "--rounds", "1"]
    subprocess.run(command + ["--out", str(out)], check=True, capture_output=True, text=True, timeout=300)
    report = json.loads(out.with_suffix(".json").read_text())
    assert "photo-like images generated" in report["details"]["files"]
    table = next(block for block in report["body"] if block["type"] == "table")
    rows = [(row[0], row[1]) for row in table["rows"]]
    ways = ["one bytes object per file", "one tensor per file", "custom_op.pack_files"]
    assert rows == [(batch, way) for batch in ("4", "8") for way in ways]
    for numbers in table["numbers"]:
        main_ms, per_image, workers_ms, wall_ms = numbers[2:6]
        assert main_ms > 0 and per_image > 0 and workers_ms >= 0 and wall_ms > 0
