"""Walk and patch the marker structure of JPEG bytes, for tests that check or damage files on purpose."""

from __future__ import annotations

import struct
from typing import NamedTuple

SOI, EOI, SOS, DRI, DHT, DQT = 0xD8, 0xD9, 0xDA, 0xDD, 0xC4, 0xDB
APP0, APP1, APP14 = 0xE0, 0xE1, 0xEE
RST = range(0xD0, 0xD8)
# Every SOFn; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frame headers.
SOF = tuple(m for m in range(0xC0, 0xD0) if m not in (0xC4, 0xC8, 0xCC))
SOF_ARITHMETIC = tuple(m for m in SOF if m >= 0xC9)


class Segment(NamedTuple):
    marker: int  # second byte of the marker, e.g. 0xDA for SOS
    offset: int  # index of the 0xFF that starts the marker
    length: int  # whole segment in bytes, marker included (2 for markers without a payload)
    entropy_end: int  # for SOS: where its entropy-coded data ends (the next non-RST marker); else offset+length


def segments(data: bytes) -> list[Segment]:
    """Markers from SOI to EOI (or to where the data stops making sense) in file order.

    Entropy-coded data after each SOS is skipped, so multi-scan (progressive) files list all their scans
    and tables. RST markers are not listed (see `restart_marker_count`).
    """
    out: list[Segment] = []
    n = len(data)
    if n < 2 or data[0] != 0xFF or data[1] != SOI:
        return out
    out.append(Segment(SOI, 0, 2, 2))
    pos = 2
    while pos + 1 < n:
        if data[pos] != 0xFF:
            break
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == EOI:
            out.append(Segment(EOI, pos, 2, pos + 2))
            break
        if pos + 4 > n:
            break
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        end = pos + 2 + length
        if length < 2 or end > n:
            break
        entropy_end = end
        if marker == SOS:
            entropy_end = _skip_entropy_data(data, end)
        out.append(Segment(marker, pos, 2 + length, entropy_end))
        pos = entropy_end
    return out


def _skip_entropy_data(data: bytes, pos: int) -> int:
    n = len(data)
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= n:
            return n
        nxt = data[pos + 1]
        if nxt == 0x00 or nxt in RST or nxt == 0xFF:
            pos += 1 if nxt == 0xFF else 2
            continue
        return pos


def find(data: bytes, markers) -> Segment | None:
    """First segment whose marker is in `markers` (an int or a collection of ints)."""
    wanted = (markers,) if isinstance(markers, int) else tuple(markers)
    for segment in segments(data):
        if segment.marker in wanted:
            return segment
    return None


def restart_marker_count(data: bytes) -> int:
    """Number of RSTn markers inside the entropy-coded data of all scans."""
    count = 0
    for segment in segments(data):
        if segment.marker != SOS:
            continue
        body = data[segment.offset + segment.length : segment.entropy_end]
        count += sum(body.count(bytes((0xFF, m))) for m in RST)
    return count


def patch_sof(
    data: bytes, *, precision: int | None = None, height: int | None = None, width: int | None = None
) -> bytes:
    """Copy of `data` with the frame header's sample precision and/or declared size replaced."""
    sof = find(data, SOF)
    if sof is None:
        raise ValueError("no SOF marker in data")
    out = bytearray(data)
    base = sof.offset + 4  # P, then Y (2 bytes), then X (2 bytes)
    if precision is not None:
        out[base] = precision
    if height is not None:
        out[base + 1 : base + 3] = struct.pack(">H", height)
    if width is not None:
        out[base + 3 : base + 5] = struct.pack(">H", width)
    return bytes(out)


def sof_info(data: bytes) -> tuple[int, int, int, list[tuple[int, int, int]]]:
    """(precision, height, width, [(component id, h factor, v factor), ...]) from the frame header."""
    sof = find(data, SOF)
    if sof is None:
        raise ValueError("no SOF marker in data")
    base = sof.offset + 4
    precision = data[base]
    height, width = struct.unpack(">HH", data[base + 1 : base + 5])
    count = data[base + 5]
    components = []
    for i in range(count):
        cid, factors = data[base + 6 + 3 * i], data[base + 7 + 3 * i]
        components.append((cid, factors >> 4, factors & 0x0F))
    return precision, height, width, components
