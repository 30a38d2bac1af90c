"""Find the restart segments of a single-scan JPEG, for tests that check or damage them on purpose."""

from __future__ import annotations

import struct
from typing import NamedTuple

import jpeg_markers as jm


class Scan(NamedTuple):
    start: int  # first byte of entropy-coded data (just past the SOS segment)
    end: int  # the marker that ends the scan (EOI)
    segments: list  # (first byte, end) of each segment's entropy-coded bytes, in file order
    markers: list  # (offset of the FF, n) of each RSTn, in file order


def scan(data: bytes) -> Scan:
    """The first scan's restart segments, read as a decoder would (FF 00 stuffing, FF fill bytes)."""
    sos = jm.find(data, jm.SOS)
    if sos is None:
        raise ValueError("no SOS segment")
    start = pos = sos.offset + sos.length
    segments, markers = [], []
    seg_start = start
    while True:
        ff = data.find(b"\xff", pos)
        if ff < 0 or ff + 1 >= len(data):
            raise ValueError("the scan has no end marker")
        q = ff + 1
        while q < len(data) and data[q] == 0xFF:
            q += 1
        code = data[q]
        if code == 0x00:
            pos = q + 1
            continue
        segments.append((seg_start, ff))
        if 0xD0 <= code <= 0xD7:
            markers.append((ff, code - 0xD0))
            seg_start = pos = q + 1
            continue
        return Scan(start, ff, segments, markers)


def restart_interval(data: bytes) -> int:
    """The DRI value in force at the first scan (0 when there is none)."""
    value = 0
    for segment in jm.segments(data):
        if segment.marker == jm.SOS:
            break
        if segment.marker == jm.DRI:
            (value,) = struct.unpack(">H", data[segment.offset + 4 : segment.offset + 6])
    return value


def with_restart_interval(data: bytes, interval: int) -> bytes:
    """A copy whose DRI segments declare another interval (the markers in the data are unchanged)."""
    out = bytearray(data)
    for segment in jm.segments(data):
        if segment.marker == jm.SOS:
            break
        if segment.marker == jm.DRI:
            out[segment.offset + 4 : segment.offset + 6] = struct.pack(">H", interval)
    return bytes(out)
