"""bench/ncu_hot_instructions.py on Nsight Compute source pages written here (the layout of `ncu --page source
--print-source sass --csv`): the stall reasons' shares and the instructions with the most samples, by their offset
in the kernel."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import ncu_hot_instructions  # noqa: E402

HEADER = [
    "Address",
    "Source",
    "Warp Stall Sampling (All Samples)",
    "Warp Stall Sampling (Not-issued Samples)",
    "Instructions Executed",
    "Avg. Threads Executed",
    "stall_long_sb",
    "stall_wait",
    "stall_long_sb (Not Issued)",
]


def _write(path: Path, kernel: str, rows: list[list[str]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", kernel])
        w.writerow(HEADER)
        w.writerows(rows)


def test_the_hottest_instructions_and_stall_reasons(tmp_path, capsys):
    _write(
        tmp_path / "source_guess_chunks_kernel.csv",
        "guess_chunks_kernel(int)",
        [
            ["0x7f0000001000", "ISETP.GT.AND P0, PT, R4, 0x1f, PT", "10", "8", "1,000", "2.0", "0", "10", "0"],
            ["0x7f0000001010", "LDG.E.U16.CONSTANT R36, desc[UR6][R36.64]", "30", "30", "1,000", "2.0", "5", "25", "5"],
            ["0x7f0000001020", "ISETP.NE.AND P0, PT, R36, RZ, PT", "60", "60", "1,000", "2.0", "50", "10", "50"],
        ],
    )
    (tmp_path / "source_sync_chunks_kernel.csv").write_text("")  # no launch of it was profiled
    assert ncu_hot_instructions.main([str(tmp_path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("guess_chunks_kernel(int): 3 instructions, 100 samples")
    assert "stall reasons: long_sb 55.0%, wait 45.0%" in out  # the (Not Issued) columns are not reasons of their own
    lines = [line.split() for line in out.splitlines() if line.strip().startswith("0x")]
    assert [(line[0], line[1], line[4]) for line in lines] == [("0x20", "60.0%", "long_sb"), ("0x10", "30.0%", "wait")]
    assert lines[0][2:4] == ["1,000", "2.0"] and lines[0][-1] == "PT"


def test_a_folder_without_source_pages_or_a_file_of_another_kind(tmp_path, capsys):
    assert ncu_hot_instructions.main([str(tmp_path)]) == 1
    assert "no source_*.csv" in capsys.readouterr().err
    (tmp_path / "source_x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an Nsight Compute source page"):
        ncu_hot_instructions.main([str(tmp_path)])
