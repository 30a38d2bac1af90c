"""What the jpeg_core tests share (tests/test_jpeg_core.py, tests/test_sync_decode.py): the sampling factors and
sizes every decode is tested on, the test writer's encode with those names, and the damage the fuzz tests do to a
file's scan."""

from __future__ import annotations

import random

import pytest

import jpeg_factory

SAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "gray"]
# (height, width): 1x1, 1xN, Nx1, 2- and 3-pixel-wide and -high images, sizes that are not multiples of any MCU.
SIZES = [
    (1, 1),
    (1, 37),
    (29, 1),
    (2, 2),
    (2, 9),
    (9, 2),
    (3, 3),
    (3, 17),
    (17, 3),
    (16, 16),
    (17, 33),
    (31, 47),
    (64, 48),
    (97, 83),
]
# Per-component factors libjpeg accepts beyond the usual names: every method of jinit_upsampler, chroma
# subsampled vertically only, luma subsampled against chroma, ratios of 3 and 4 (replication), mixed ratios.
UNUSUAL_SAMPLINGS = [
    "2x2,1x2,1x2",
    "2x2,2x1,2x1",
    "1x1,2x2,2x2",
    "4x2,1x1,1x1",
    "3x1,1x1,1x1",
    "1x3,1x1,1x1",
    "3x2,1x1,1x1",
    "2x1,1x1,2x1",
    "4x1,2x1,1x1",
    "1x4,1x2,1x1",
    "2x2,1x1,2x2",
    "1x1,1x2,2x1",
]


def _writer():
    reason = jpeg_factory.unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot build the test JPEG writer: {reason}")
    return jpeg_factory


# Sampling names the writer does not know, as its factor lists (Y first).
EXTRA_SAMPLINGS = {"4:1:0": "4x2,1x1,1x1"}


def encode(pixels, sampling, **options):
    """`pixels` encoded by the test writer with `sampling` (a name, "gray", or factors such as "2x2,1x1,1x1");
    skips the test where the writer cannot be built."""
    if sampling == "gray":
        return _writer().encode(pixels if pixels.ndim == 2 else pixels[:, :, 0], **options)
    return _writer().encode(pixels, sampling=EXTRA_SAMPLINGS.get(sampling, sampling), **options)


def scan_segments(data: bytes):
    """(begin, end) of each entropy-coded segment and the offset of the EOI, read like the core's scanner."""
    pos = 2
    while True:
        assert data[pos] == 0xFF
        marker, length = data[pos + 1], int.from_bytes(data[pos + 2 : pos + 4], "big")
        pos += 2 + length
        if marker == 0xDA:
            break
    segments, begin, p = [], pos, pos
    while True:
        p = data.index(b"\xff", p)
        q = p + 1
        while data[q] == 0xFF:
            q += 1
        if data[q] == 0x00:
            p = q + 1
            continue
        segments.append((begin, p))
        if data[q] == 0xD9:
            return segments, p
        begin = p = q + 1


def mutate(data: bytes, rng: random.Random) -> bytes:
    """`data` with one random kind of damage inside or around its scan: what the fuzz tests decode."""
    segments, eoi = scan_segments(data)
    b, e = segments[rng.randrange(len(segments))]
    kind = rng.randrange(11)
    if kind <= 2 and e > b:  # flip 1-3 bits inside a segment
        out = bytearray(data)
        for _ in range(kind + 1):
            at = rng.randrange(b, e)
            out[at] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == 3:  # cut the file somewhere in the scan, maybe adding EOI back
        at = rng.randrange(segments[0][0], eoi + 1)
        return data[:at] + (b"\xff\xd9" if rng.random() < 0.5 else b"")
    if kind == 4 and e > b:  # delete bytes inside a segment
        at = rng.randrange(b, e)
        return data[:at] + data[at + rng.randint(1, 4) :]
    if kind == 5:  # insert random bytes, stuffed FFs or markers inside a segment
        at = rng.randrange(b, e + 1)
        junk = rng.choice(
            [
                bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))),
                b"\xff\x00",
                b"\xff\xff\x00",
                bytes([0xFF, 0xD0 + rng.randrange(8)]),
                b"\xff\xd9",
                b"\xff\xff",
            ]
        )
        return data[:at] + junk + data[at:]
    if kind == 6 and e + 2 <= eoi:  # renumber or remove a restart marker
        if rng.random() < 0.5:
            return data[: e + 1] + bytes([0xD0 + rng.randrange(8)]) + data[e + 2 :]
        return data[:e] + data[e + 2 :]
    if kind == 7 and len(segments) > 1:  # swap two segments' data
        b2, e2 = segments[rng.randrange(len(segments))]
        if (b2, e2) != (b, e):
            (b1, e1), (b2, e2) = sorted([(b, e), (b2, e2)])
            return data[:b1] + data[b2:e2] + data[e1:b2] + data[b1:e1] + data[e2:]
    if kind == 8 and e > b:  # a byte set to FF or 00
        at = rng.randrange(b, e)
        return data[:at] + bytes([rng.choice([0xFF, 0x00])]) + data[at + 1 :]
    if kind == 9:  # a Huffman table's code counts (the DHT segments come before the scan)
        at = data.find(b"\xff\xc4")
        if at >= 0:
            counts = at + 5
            out = bytearray(data)
            if rng.random() < 0.3:  # a count changed: libjpeg's DHT reader usually refuses the length
                pos = counts + rng.randrange(16)
                out[pos] = rng.choice([0, 1, 2, 255, (out[pos] + 1) & 255, (out[pos] - 1) & 255])
            else:  # a code moved to another length, same total: may over-subscribe the code space
                i, j = rng.randrange(16), rng.randrange(16)
                if out[counts + i] > 0 and out[counts + j] < 255:
                    out[counts + i] -= 1
                    out[counts + j] += 1
            return bytes(out)
    if kind == 10 and rng.random() < 0.3:  # the scan header's table selectors or component order
        at = data.find(b"\xff\xda")
        count = data[at + 4]
        out = bytearray(data)
        if rng.random() < 0.5 and count > 1:
            i, j = rng.sample(range(count), 2)
            a, b_ = at + 5 + 2 * i, at + 5 + 2 * j
            out[a], out[b_] = out[b_], out[a]
        else:
            out[at + 6 + 2 * rng.randrange(count)] = rng.randrange(256)
        return bytes(out)
    out = bytearray(data)  # random bytes anywhere in the scan
    for _ in range(rng.randint(1, 6)):
        out[rng.randrange(segments[0][0], eoi)] = rng.randrange(256)
    return bytes(out)
