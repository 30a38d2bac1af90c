"""bench/chunk_sync_rounds.py on generated photos: the CPU harness's counts of chunks left out of step after each
number of rounds, with the GPU decoder's settings read from its source, as a report with one table a case."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import chunk_sync_rounds  # noqa: E402

import jpeg_core_build as core  # noqa: E402

pytestmark = pytest.mark.skipif(
    core.unavailable_reason() is not None, reason=f"cannot build the jpeg_core harness: {core.unavailable_reason()}"
)


def test_the_gpu_settings_are_read_from_its_source():
    assert core.gpu_constant(core.GPU_EXECUTOR, "kChunkBytes") > 0
    assert core.gpu_constant(core.GPU_DECODER, "kSyncRounds") >= 1
    assert core.gpu_constant(core.GPU_DECODER_HEADER, "kMaxChunkParts") >= 1
    with pytest.raises(ValueError, match="defines no kNoSuchThing"):
        core.gpu_constant(core.GPU_DECODER, "kNoSuchThing")


def test_the_report_counts_after_each_number_of_rounds(tmp_path):
    out = tmp_path / "rounds.md"
    assert (
        chunk_sync_rounds.main(
            ["--imagenet", str(tmp_path / "absent"), "--n-generated", "3", "--n-large", "0", "--rounds", "1", "3"]
            + ["--out", str(out)]
        )
        == 0
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert "chunks of 512 bytes" in report["details"]["the GPU decoder's settings"]
    tables = [b for b in report["body"] if b["type"] == "table"]
    assert len(tables) == 1, "only the generated case (the photos' folder is absent)"
    rows = tables[0]["numbers"]
    assert [r[0] for r in rows] == [1, 3]
    assert all(r[-1] == 0 for r in rows), "a photo flagged or decoded wrong"
    assert rows[1][1] <= rows[0][1], "more rounds left more chunks out of step"
    guesses = tables[0]["columns"].index("chunk decodes of stage 1 (its guesses)")
    assert rows[0][guesses] == rows[1][guesses] > 0, "stage 1 does not depend on the rounds"


def test_the_large_photos_tables_count_where_the_rounds_meet(tmp_path):
    """With a large photo: its table by layout, and its table by the part ends where a round's decode may meet its
    chunk's guess, whose blocks fall as the part ends grow finer and stay below what the warps wait for."""
    out = tmp_path / "large.md"
    argv = ["--imagenet", str(tmp_path / "absent"), "--n-generated", "0", "--n-large", "1", "--out", str(out)]
    assert chunk_sync_rounds.main(argv) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    tables = [b for b in report["body"] if b["type"] == "table"]
    assert len(tables) == 2
    assert all(r[-1] == 0 for r in tables[0]["numbers"]), "a photo flagged or decoded wrong"
    meeting = tables[1]
    assert meeting["columns"] == chunk_sync_rounds.MEETING_COLUMNS
    rows = meeting["numbers"]
    assert rows[0][0] == core.gpu_constant(core.GPU_DECODER_HEADER, "kMaxChunkParts")
    blocks = [r[1] for r in rows]
    assert blocks == sorted(blocks, reverse=True) and blocks[-1] > 0, blocks
    assert all(r[1] <= r[2] for r in rows), rows
