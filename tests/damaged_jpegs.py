"""Damaged copies of a valid single-scan JPEG, for the tests of what each path makes of damage: cut
short (with and without an end-of-image marker after the cut), bits flipped in the entropy-coded
data, restart markers misnumbered, missing or doubled, stray bytes before a restart marker or before
the end-of-image marker. Each copy is named by what was done to it."""

from __future__ import annotations

import numpy as np

import restart_segments

EOI = b"\xff\xd9"


def entropy_start(data: bytes) -> int:
    """The offset of the first byte of entropy-coded data (just past the first SOS segment)."""
    sos = data.index(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")


def damaged(data: bytes, rng: np.random.Generator, flips: int = 20) -> list[tuple[str, bytes]]:
    """(name, bytes) of damaged copies of ``data``; the restart cases only where ``data`` has restart
    markers (at least three)."""
    start = entropy_start(data)
    scan = restart_segments.scan(data)
    size = scan.end - start  # the entropy-coded bytes
    out = []
    for fraction in (0.0, 0.3, 0.7):
        cut = start + 1 + int(fraction * size)
        out.append((f"cut at {fraction:.0%} of the scan", data[:cut]))
        out.append((f"cut at {fraction:.0%} of the scan, end-of-image marker after the cut", data[:cut] + EOI))
    out.append(("the last byte before the end-of-image marker dropped", data[: scan.end - 1] + data[scan.end :]))
    out.append(("two stray bytes before the end-of-image marker", data[: scan.end] + b"\x12\x34" + data[scan.end :]))
    for k in range(flips):
        copy = bytearray(data)
        for position in rng.integers(start, scan.end, size=int(rng.integers(1, 4))):
            copy[position] ^= 1 << int(rng.integers(0, 8))
        out.append((f"bits flipped ({k})", bytes(copy)))
    if len(scan.markers) >= 3:
        i, n = scan.markers[len(scan.markers) // 2]
        out.append(("a restart marker misnumbered", data[: i + 1] + bytes([0xD0 + (n + 3) % 8]) + data[i + 2 :]))
        out.append(("a restart marker missing", data[:i] + data[i + 2 :]))
        out.append(("a restart marker doubled", data[: i + 2] + data[i : i + 2] + data[i + 2 :]))
        out.append(("two stray bytes before a restart marker", data[:i] + b"\x12\x34" + data[i:]))
        out.append(("fill bytes before a restart marker", data[:i] + b"\xff\xff" + data[i + 1 :]))
    return out
