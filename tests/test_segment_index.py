"""custom_op/csrc/common/segment_index.{h,cpp}: the segment index prepare_jpeg writes into its files
(an APP9 segment saying where each MCU row's restart segments end), and its reader, with which our
CUDA decoder uploads a file only as far as a window needs. The writer is tested through
prepare_jpeg against the markers found here; the reader through tests/segment_index_check.cpp,
compiled with it and with the GPU backend's header reader. The GPU tests check what a decode makes of
an index that lies."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

import custom_op
import host_checks
import jpeg_factory
import jpeg_markers as jm
import restart_segments as rs
from conftest import ROOT

WRITER_MISSING = jpeg_factory.unavailable_reason()
pytestmark = pytest.mark.skipif(WRITER_MISSING is not None, reason=f"no test JPEG writer: {WRITER_MISSING}")

SOURCES = [ROOT / "tests" / "segment_index_check.cpp", *host_checks.HEADER_READER]
APP9 = 0xE9
ID = b"custom_op.index\0"


def _index(data: bytes) -> tuple[int, dict]:
    """The index segment's offset and its fields, parsed here independently of the C++ reader."""
    seg = next(s for s in jm.segments(data) if s.marker == APP9 and data[s.offset + 4 : s.offset + 20] == ID)
    body = data[seg.offset + 20 : seg.offset + seg.length]
    version, size, scan_start, per_entry, count = struct.unpack(">BIIII", body[:17])
    entries = list(struct.unpack(f">{count}I", body[17 : 17 + 4 * count]))
    assert len(body) == 17 + 4 * count
    fields = {"version": version, "size": size, "scan_start": scan_start, "per_entry": per_entry, "entries": entries}
    return seg.offset, fields


def _marker_ends(data: bytes) -> list[int]:
    """For each restart segment, the offset just past the marker (RSTn or EOI) that ends it."""
    scan = rs.scan(data)
    return [ff + 2 for ff, _ in scan.markers] + [scan.end + 2]


def _mcus_per_row(data: bytes) -> int:
    sof = jm.find(data, jm.SOF)
    base = sof.offset + 4
    width, components = struct.unpack(">H", data[base + 3 : base + 5])[0], data[base + 5]
    max_h = max(data[base + 7 + 3 * i] >> 4 for i in range(components)) if components > 1 else 1
    return -(-width // (8 * max_h))


def _photo(height: int, width: int, sampling: str, seed: int = 0) -> bytes:
    return jpeg_factory.encode(jpeg_factory.photo_like(height, width, seed=seed), sampling=sampling, quality=90)


@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1"])
@pytest.mark.parametrize("height,width", [(1, 1), (61, 47), (130, 211)])
@pytest.mark.parametrize("restart_mcus", [None, 1, 3])
def test_prepared_file_indexes_each_rows_segments(sampling, height, width, restart_mcus):
    data = custom_op.prepare_jpeg(_photo(height, width, sampling), restart_mcus=restart_mcus)
    at, index = _index(data)
    ends = _marker_ends(data)
    per_row = _mcus_per_row(data)
    interval = rs.restart_interval(data)
    assert index["version"] == 1 and index["size"] == len(data)
    assert index["scan_start"] == rs.scan(data).start
    # An entry per MCU row's segments (when the interval does not divide the row, a row's worth).
    assert index["per_entry"] == max(1, per_row // interval)
    per = index["per_entry"]
    expected = [ends[min((g + 1) * per, len(ends)) - 1] for g in range(-(-len(ends) // per))]
    assert index["entries"] == expected
    assert index["entries"][-1] == len(data)
    # After the leading application segments (JFIF's APP0 stays first), before the tables.
    before = [s.marker for s in jm.segments(data) if s.offset < at]
    assert before[0] == jm.SOI and all(0xE0 <= m <= 0xEF for m in before[1:])


def test_preparing_a_prepared_file_keeps_one_index():
    once = custom_op.prepare_jpeg(_photo(130, 211, "4:2:0"))
    twice = custom_op.prepare_jpeg(once)
    assert sum(s.marker == APP9 for s in jm.segments(twice)) == 1
    assert _index(twice)[1]["size"] == len(twice)


def test_size_budget_counts_the_index():
    """The growth budget of the automatic interval holds with the index's bytes included."""
    original = _photo(256, 384, "4:2:0", seed=3)
    prepared = custom_op.prepare_jpeg(original)
    one_per_row = custom_op.prepare_jpeg(original, restart_mcus=65535)
    budget = max(len(original), len(one_per_row)) * (1 + custom_op.prepare.DEFAULT_MAX_GROWTH)
    assert len(prepared) <= budget


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Path:
    return host_checks.build(tmp_path_factory.mktemp("segment_index"), "segment_index_check", SOURCES, ["-O2"])


def _upload_ends(check: Path, data: bytes, segments: int, tmp_path: Path) -> list[int] | None:
    path = tmp_path / "file.jpg"
    path.write_bytes(data)
    out = subprocess.run([str(check), str(path), str(segments)], capture_output=True, text=True, timeout=60, check=True)
    lines = out.stdout.split()
    return None if lines[0] == "0" else [int(v) for v in lines[1:]]


def _patched(data: bytes, field_at: int, value: bytes) -> bytes:
    at, _ = _index(data)
    pos = at + 20 + field_at
    return data[:pos] + value + data[pos + len(value) :]


@pytest.mark.parametrize("sampling,restart_mcus", [("4:2:0", None), ("4:4:4", 3), ("4:2:2", 1)])
def test_reader_uploads_through_the_row_that_ends_each_segment(check, tmp_path, sampling, restart_mcus):
    data = custom_op.prepare_jpeg(_photo(130, 211, sampling, seed=1), restart_mcus=restart_mcus)
    ends = _marker_ends(data)
    per = _index(data)[1]["per_entry"]
    got = _upload_ends(check, data, len(ends), tmp_path)
    assert got is not None and len(got) == len(ends)
    for s, end in enumerate(got):
        # Past the marker that ends segment s: at the end of its row's entry, which is short of the file
        # but for the last row.
        assert end == ends[min((s // per + 1) * per, len(ends)) - 1] >= ends[s]
    assert got[0] < len(data) and got[-1] == len(data)


def test_reader_refuses_an_index_that_does_not_fit_the_file(check, tmp_path):
    data = custom_op.prepare_jpeg(_photo(130, 211, "4:2:0", seed=2))
    n = len(_marker_ends(data))
    assert _upload_ends(check, data, n, tmp_path) is not None
    cases = {
        "bytes after EOI (the recorded size differs)": (data + b"\0", n),
        "another version": (_patched(data, 0, b"\x02"), n),
        "another scan start": (_patched(data, 5, struct.pack(">I", rs.scan(data).start + 1)), n),
        "no segment per entry": (_patched(data, 9, struct.pack(">I", 0)), n),
        "another count of segments": (data, n + 1),
        "no index at all": (_photo(130, 211, "4:2:0", seed=2), n),
    }
    for name, (bad, segments) in cases.items():
        assert _upload_ends(check, bad, segments, tmp_path) is None, name


def test_reader_keeps_entries_within_the_scan(check, tmp_path):
    """An entry past the file uploads the file; one before the scan, nothing of it (the GPU then finds no
    marker, and the item goes to the CPU path)."""
    data = custom_op.prepare_jpeg(_photo(130, 211, "4:2:0", seed=4))
    n = len(_marker_ends(data))
    start = rs.scan(data).start
    lying = _patched(data, 17, struct.pack(">II", 1 << 31, 3))
    got = _upload_ends(check, lying, n, tmp_path)
    per = _index(data)[1]["per_entry"]
    assert got[:per] == [len(data)] * per and got[per : 2 * per] == [start] * per
