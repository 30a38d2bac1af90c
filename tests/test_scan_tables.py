"""custom_op/csrc/cuda/scan_tables.cpp (the quantisation and Huffman tables our CUDA decoder uploads,
read on the host), tested on the CPU: tests/scan_tables_check.cpp is compiled with it and prints the
quantisation tables it reads, which must be the file's DQT tables put in natural order (computed here
independently). The GPU tests exercise it inside every batch of prepared files."""

from __future__ import annotations

import io
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import host_checks
import jpeg_factory
import jpeg_markers as jm
from conftest import ROOT

CSRC = host_checks.CSRC
SOURCES = [ROOT / "tests" / "scan_tables_check.cpp", CSRC / "cuda" / "scan_tables.cpp", *host_checks.HEADER_READER]


def _zigzag_of_natural() -> list[int]:
    """For each natural (row-major) position, its index in the zigzag walk of the JPEG standard."""
    order = sorted((r + c, r if (r + c) % 2 else c, r, c) for r in range(8) for c in range(8))
    index = [0] * 64
    for k, (_, _, r, c) in enumerate(order):
        index[8 * r + c] = k
    return index


ZIGZAG = _zigzag_of_natural()


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Path:
    return host_checks.build(tmp_path_factory.mktemp("scan_tables"), "scan_tables_check", SOURCES, ["-O2"])


def _read(check: Path, data: bytes, tmp_path: Path) -> list[list[int]] | None:
    path = tmp_path / "file.jpg"
    path.write_bytes(data)
    out = subprocess.run([str(check), str(path)], capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.split("\n")
    return None if lines[0] == "0" else [[int(v) for v in line.split()] for line in lines[1:] if line]


def _expected(data: bytes) -> list[list[int]]:
    """Each frame component's table in natural order, from the file's DQT and SOF segments."""
    tables = {}
    for seg in jm.segments(data):
        if seg.marker != jm.DQT:
            continue
        body, pos = data[seg.offset + 4 : seg.offset + seg.length], 0
        while pos < len(body):
            precision, index = body[pos] >> 4, body[pos] & 15
            size = 2 if precision else 1
            stored = body[pos + 1 : pos + 1 + 64 * size]
            zigzag = struct.unpack(">64H", stored) if precision else tuple(stored)
            tables[index] = [zigzag[ZIGZAG[p]] for p in range(64)]
            pos += 1 + 64 * size
    sof = jm.find(data, jm.SOF)
    base = sof.offset + 4
    return [tables[data[base + 8 + 3 * i]] for i in range(data[base + 5])]  # each component's table


def _as_16_bit(data: bytes, seed: int) -> bytes:
    """data with every DQT table rewritten with 16-bit precision and random values."""
    rng = np.random.default_rng(seed)
    out = bytearray()
    pos = 0
    for seg in jm.segments(data):
        if seg.marker != jm.DQT:
            continue
        out += data[pos : seg.offset]
        body, k, new = data[seg.offset + 4 : seg.offset + seg.length], 0, bytearray()
        while k < len(body):
            new += bytes([0x10 | (body[k] & 15)]) + struct.pack(">64H", *rng.integers(1, 65536, 64).tolist())
            k += 1 + 64 * (2 if body[k] >> 4 else 1)
        out += b"\xff\xdb" + struct.pack(">H", len(new) + 2) + new
        pos = seg.offset + seg.length
    return bytes(out + data[pos:])


def _photo(quality: int, subsampling: int, gray: bool = False, restart: bool = True) -> bytes:
    pixels = jpeg_factory.photo_like(48, 64, seed=quality)
    image = Image.fromarray(pixels).convert("L") if gray else Image.fromarray(pixels)
    buf = io.BytesIO()
    options = {"restart_marker_blocks": 1} if restart else {}
    image.save(buf, "JPEG", quality=quality, subsampling=subsampling, **options)
    return buf.getvalue()


@pytest.mark.parametrize(
    "quality,subsampling,gray", [(95, 0, False), (75, 1, False), (50, 2, False), (20, 2, False), (85, 0, True)]
)
def test_quantisation_tables_in_natural_order(check, tmp_path, quality, subsampling, gray):
    data = _photo(quality, subsampling, gray)
    assert _read(check, data, tmp_path) == _expected(data)


@pytest.mark.parametrize("seed", range(4))
def test_16_bit_quantisation_tables(check, tmp_path, seed):
    data = _as_16_bit(_photo(80, 2), seed)
    assert any(jm.segments(data)) and _read(check, data, tmp_path) == _expected(data)


def test_truncated_table_is_refused(check, tmp_path):
    data = _photo(80, 2)
    seg = next(s for s in jm.segments(data) if s.marker == jm.DQT)
    # One byte fewer than the table needs: libjpeg zero-fills such a table, and our reader leaves the
    # file to the CPU path.
    body = data[seg.offset + 4 : seg.offset + seg.length - 1]
    short = data[: seg.offset + 2] + struct.pack(">H", seg.length - 3) + body + data[seg.offset + seg.length :]
    assert _read(check, short, tmp_path) is None
