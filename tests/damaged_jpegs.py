"""Damaged copies of a valid single-scan JPEG, for the tests of what each path makes of damage.

damaged(): one copy of each case, named by what was done to it: cut short (with and without an
end-of-image marker after the cut), bits flipped in the entropy-coded data, restart markers
misnumbered, missing or doubled, stray bytes before a restart marker or before the end-of-image marker.

damaged_copies() / damaged_copy(): as many copies as asked of a file with restart markers, the damage
at random places, for the hostile batches through our CUDA decoder (tests/test_gpu.py, and the long run
of bench/gpu_decoder_soak.py). Only bytes from 20 past the SOS marker on change, so that the header
still reads and a window chosen from it stays inside the image. Each kind aims at one of the decoder's
checks: a bit flip makes a bad Huffman code or a segment of the wrong length, a renumbered or removed
restart marker breaks the marker sequence, inserted or cut bytes shift a segment, and a file whose end
is cut off lacks its last segments and its end marker.
"""

from __future__ import annotations

import re

import numpy as np

import restart_segments

EOI = b"\xff\xd9"
#: The kinds of damage of damaged_copy(), in the order damaged_copies() cycles through them.
KINDS = (
    "bit flips",
    "restart marker renumbered",
    "restart marker removed",
    "bytes inserted",
    "bytes cut",
    "end cut off",
)
_RST = re.compile(rb"\xff[\xd0-\xd7]")


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


def restart_markers(data: bytes, start: int = 0) -> list[int]:
    """Where each restart marker (FF D0..D7) of ``data`` starts, from ``start`` on."""
    return [m.start() for m in _RST.finditer(data, start)]


def damaged_copy(data: bytes, rng: np.random.Generator, kind: int, markers=None) -> bytes:
    """A copy of ``data`` with damage of ``KINDS[kind]`` at a random place. A file without restart
    markers gets its end cut off instead of a marker renumbered or removed. ``markers``:
    restart_markers(data) when the caller has it already (finding them reads the whole file)."""
    start = data.index(b"\xff\xda")
    if markers is None:
        markers = restart_markers(data, start)
    d = bytearray(data)
    at = int(rng.integers(start + 20, len(d) - 4))
    if kind == 0:
        for _ in range(int(rng.integers(1, 4))):
            d[int(rng.integers(start + 20, len(d) - 4))] ^= 1 << int(rng.integers(0, 8))
    elif kind == 1 and markers:
        m = markers[int(rng.integers(0, len(markers)))]
        d[m + 1] = 0xD0 + (d[m + 1] - 0xD0 + 1 + int(rng.integers(0, 6))) % 8
    elif kind == 2 and markers:
        m = markers[int(rng.integers(0, len(markers)))]
        del d[m : m + 2]
    elif kind == 3:
        d[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 5)), dtype=np.uint8))
    elif kind == 4:
        del d[at : at + int(rng.integers(1, 40))]
    else:
        d = d[: int(rng.integers(start + 10, len(d)))]
    return bytes(d)


def damaged_copies(data: bytes, rng: np.random.Generator, count: int) -> list[bytes]:
    """``count`` copies of a file with restart markers, damaged at random places, the kinds of KINDS
    in turn: bit flips, restart markers renumbered or removed, bytes inserted or cut, the end cut off."""
    markers = restart_markers(data, data.index(b"\xff\xda"))
    return [damaged_copy(data, rng, k % len(KINDS), markers) for k in range(count)]
