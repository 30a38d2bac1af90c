"""bench/window_bytes.py: the share of the rows an estimate of the bytes through a window's last row falls short
for, and the bytes it reads, from each MCU row's share of the scan's bytes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import window_bytes  # noqa: E402


def test_an_estimate_falls_short_where_the_rows_need_more_bytes():
    # Three rows holding half, a quarter and a quarter of the bytes: through them 0.5, 0.75 and 1 of the scan.
    rows = window_bytes.case_rows([np.array([0.5, 0.75, 1.0])])
    by_estimate = {r[0]: r for r in rows}
    assert by_estimate["min(1, 1 f + 0)"][1] == "2 of 3 (66.67%)"  # 0.5 > 1/3 and 0.75 > 2/3; 1.0 is not short
    assert by_estimate["min(1, 1.5 f + 0)"][1] == "0 of 3 (0.00%)"  # 0.5, 1.0 and 1.0 cover them
    assert by_estimate["min(1, 1 f + 0)"][3] == "0.667"  # (1/3 + 2/3 + 1) / 3
    assert all(r[4] == "0.750" for r in rows)  # what the rows need does not depend on the estimate


def test_the_report_has_a_table_a_case(tmp_path):
    out = tmp_path / "window_bytes.md"
    assert (
        window_bytes.main(
            ["--imagenet", str(tmp_path / "absent"), "--n-medium", "3", "--n-large", "0"]
            + [
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.with_suffix(".json").read_text())
    tables = [b for b in report["body"] if b["type"] == "table"]
    assert len(tables) == 1, "only the generated case (the photos' folder is absent)"
    numbers = tables[0]["numbers"]
    assert len(numbers) == len(window_bytes.ESTIMATES)
    read, needed = [r[3] for r in numbers], [r[4] for r in numbers]
    assert len(set(needed)) == 1 and 0 < needed[0] <= 1
    assert read == sorted(read), "a larger estimate read fewer bytes"
