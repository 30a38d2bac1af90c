"""Base JPEG files and deterministic mutations of them, for the fuzz tests (tests/test_fuzz.py).

`variant(base, seed, index)` is a pure function of its arguments, so any failing case can be rebuilt
from the three values a failure report prints.
"""

from __future__ import annotations

import random
import struct
from functools import cache
from pathlib import Path

import jpeg_factory
import jpeg_markers as jm
import photo_data  # where the real files are (CUSTOM_OP_TEST_DATA), as for conftest.py


def _exif_app1(orientation: int, big_endian: bool) -> bytes:
    """A minimal EXIF APP1 segment holding only an orientation tag."""
    e = ">" if big_endian else "<"
    tiff = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8)
    tiff += struct.pack(e + "H", 1) + struct.pack(e + "HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(e + "I", 0)
    payload = b"Exif\x00\x00" + tiff
    return b"\xff\xe1" + struct.pack(">H", 2 + len(payload)) + payload


def _with_exif(data: bytes, orientation: int, big_endian: bool) -> bytes:
    return data[:2] + _exif_app1(orientation, big_endian) + data[2:]


# name -> (photo_like args, encode kwargs). Sizes are not multiples of the MCU, so edge blocks count.
_GENERATED = {
    "baseline_420": ((61, 83, 3), {}),
    "baseline_444": ((45, 70, 3), {"sampling": "4:4:4"}),
    "baseline_422": ((50, 66, 3), {"sampling": "4:2:2", "optimize": True}),
    "sampling_440": ((53, 47, 3), {"sampling": "4:4:0"}),
    "sampling_411": ((40, 99, 3), {"sampling": "4:1:1"}),
    "odd_factors": ((37, 41, 3), {"sampling": "1x2,2x1,1x1"}),
    "progressive_420": ((61, 83, 3), {"progressive": True}),
    "restart_interval": ((61, 83, 3), {"restart_interval": 2}),
    "restart_rows_progressive": ((61, 83, 3), {"restart_rows": 1, "progressive": True}),
    "arithmetic": ((47, 59, 3), {"arithmetic": True}),
    "arithmetic_progressive": ((47, 59, 3), {"arithmetic": True, "progressive": True, "restart_interval": 3}),
    "gray": ((50, 77, 1), {}),
    "gray_progressive": ((50, 77, 1), {"progressive": True}),
    "cmyk": ((33, 45, 4), {"sampling": "4:4:4"}),
    "ycck_420": ((33, 45, 4), {"color_space": "ycck"}),
    "rgb_no_transform": ((30, 40, 3), {"color_space": "rgb", "sampling": "4:4:4"}),
    "exif_orientation_6": ((29, 51, 3), {}),
    "exif_orientation_7_big_endian": ((29, 51, 3), {}),
}
_EXIF = {"exif_orientation_6": (6, False), "exif_orientation_7_big_endian": (7, True)}

# Real files that nobody here wrote (small ones, so that the fuzz loop stays quick).
_REAL = {
    "real_testorig": "testorig.jpg",
    "real_cmyk": "pil_sample_cmyk.jpg",
    "real_orientation_6": "hopper_orientation_6.jpg",
    "real_exif_gps": "exif_gps.jpg",
    "real_truncated_progressive": "truncated_jpeg.jpg",
}
_IMAGENET_FILES = 3
# Bases that are themselves damaged: their unmutated form may fail like any variant.
_DAMAGED = {"real_truncated_progressive"}


def is_valid(name: str) -> bool:
    """Whether the unmutated base is a valid file that must decode cleanly."""
    return name not in _DAMAGED


def base_names() -> list[str]:
    names = list(_GENERATED)
    odd = photo_data.real_odd_dir()
    names += [n for n, name in _REAL.items() if odd is not None and (odd / name).is_file()]
    names += [f"imagenet_{i}" for i in range(len(_imagenet_paths()))]
    return names


@cache
def _imagenet_paths() -> tuple[Path, ...]:
    # The smallest few real photos: varied encoders and subsamplings, and cheap to decode thousands of times.
    files = sorted(photo_data.real_photos(), key=lambda p: (p.stat().st_size, p.name))
    return tuple(files[:_IMAGENET_FILES])


@cache
def base(name: str) -> bytes:
    if name in _GENERATED:
        (h, w, c), kwargs = _GENERATED[name]
        data = jpeg_factory.encode(jpeg_factory.photo_like(h, w, channels=c, seed=len(name)), **kwargs)
        if name in _EXIF:
            data = _with_exif(data, *_EXIF[name])
        return data
    if name in _REAL:
        return (photo_data.real_odd_dir() / _REAL[name]).read_bytes()
    if name.startswith("imagenet_"):
        return _imagenet_paths()[int(name.split("_")[1])].read_bytes()
    raise KeyError(name)


# ------------------------------------------------------------------------------------------ mutations


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(0, len(data))]


def _bit_flips(rng: random.Random, data: bytes, count: int) -> bytes:
    out = bytearray(data)
    for _ in range(count):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _header_bytes(rng: random.Random, data: bytes) -> bytes:
    """Random values at a few offsets before the entropy-coded data, where the parsers live."""
    sos = jm.find(data, jm.SOS)
    end = min(len(data), sos.offset + sos.length if sos else 600)
    if end <= 2:
        return _random_run(rng, data)
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        out[rng.randrange(2, end)] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    return bytes(out)


def _random_run(rng: random.Random, data: bytes) -> bytes:
    length = rng.randint(1, 64)
    start = rng.randrange(len(data))
    run = bytes(rng.randrange(256) for _ in range(length))
    return data[:start] + run + data[start + length :]


def _segment_edit(rng: random.Random, data: bytes) -> bytes:
    segments = [s for s in jm.segments(data) if s.marker not in (jm.SOI, jm.EOI)]
    if not segments:
        return _random_run(rng, data)
    segment = rng.choice(segments)
    whole = data[segment.offset : segment.offset + segment.length]
    choice = rng.randrange(4)
    if choice == 0:  # duplicate it right after itself or at another segment boundary
        at = rng.choice(segments).offset
        return data[:at] + whole + data[at:]
    if choice == 1:  # remove it (for SOS: with its scan data)
        end = segment.entropy_end if segment.marker == jm.SOS else segment.offset + segment.length
        return data[: segment.offset] + data[end:]
    if choice == 2:  # lying length
        declared = segment.length - 2
        fake = rng.choice(
            (0, 1, 2, declared - 1, declared + 1, declared + rng.randint(2, 300), 0xFFFF, rng.randrange(65536))
        )
        fake = max(0, min(0xFFFF, fake))
        return data[: segment.offset + 2] + struct.pack(">H", fake) + data[segment.offset + 4 :]
    # swap it with another segment
    other = rng.choice(segments)
    if other.offset == segment.offset:
        return data
    first, second = sorted((segment, other), key=lambda s: s.offset)
    a = data[first.offset : first.offset + first.length]
    b = data[second.offset : second.offset + second.length]
    return (
        data[: first.offset]
        + b
        + data[first.offset + first.length : second.offset]
        + a
        + data[second.offset + second.length :]
    )


def _sof_dims(rng: random.Random, data: bytes) -> bytes:
    sof = jm.find(data, jm.SOF)
    if sof is None or sof.offset + 9 > len(data):
        return _random_run(rng, data)
    height, width = struct.unpack(">HH", data[sof.offset + 5 : sof.offset + 9])

    def pick(v):
        return rng.choice((0, 1, 2, 7, 8, 9, 15, 16, 17, v - 1, v + 1, 2 * v, rng.randint(1, 4000), 65535))

    new_h = max(0, min(65535, pick(height))) if rng.random() < 0.7 else height
    new_w = max(0, min(65535, pick(width))) if rng.random() < 0.7 else width
    return jm.patch_sof(data, height=new_h, width=new_w)


def _insert_marker(rng: random.Random, data: bytes) -> bytes:
    """A stray marker anywhere, including inside the scan (RSTn out of order, early EOI, a new DHT)."""
    marker = rng.choice((0xD0, 0xD3, 0xD7, 0xD9, 0xD8, 0xDA, 0xC4, 0xDB, 0xDD, 0xC0, 0xC2, 0xFE, 0xE1, 0xFF))
    if 0xD0 <= marker <= 0xD9:
        blob = bytes((0xFF, marker))
    else:
        body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
        blob = bytes((0xFF, marker)) + struct.pack(">H", 2 + len(body)) + body
    at = rng.randrange(len(data) + 1)
    return data[:at] + blob + data[at:]


def _splice(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """This file's header (and maybe some scan data) with another file's tail."""
    return data[: rng.randrange(len(data))] + other[rng.randrange(len(other)) :]


def _app1_bytes(rng: random.Random, data: bytes) -> bytes:
    """Damage inside an EXIF segment (the orientation parser is ours, not libjpeg's)."""
    app1 = jm.find(data, jm.APP1)
    if app1 is None or app1.length <= 10:
        return _header_bytes(rng, data)
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[rng.randrange(app1.offset + 4, app1.offset + app1.length)] = rng.choice(
            (0, 1, 2, 3, 6, 8, 0xFF, rng.randrange(256))
        )
    return bytes(out)


MUTATIONS = (
    "truncate",
    "bit_flip",
    "bit_flips",
    "header_bytes",
    "random_run",
    "segment_edit",
    "sof_dims",
    "insert_marker",
    "splice",
    "app1_bytes",
    "stacked",
)


def variant(name: str, seed: int, index: int) -> tuple[str, bytes]:
    """The index-th mutation of base `name` under `seed`: (mutation name, bytes)."""
    rng = random.Random(f"{name}/{seed}/{index}")
    data = base(name)
    kind = MUTATIONS[index % len(MUTATIONS)]
    return kind, mutate(rng, kind, data)


def mutate(rng: random.Random, kind: str, data: bytes) -> bytes:
    """`data` changed by the mutation named `kind` (one of MUTATIONS), drawing from `rng`."""
    if not data:
        return data
    if kind == "truncate":
        return _truncate(rng, data)
    if kind == "bit_flip":
        return _bit_flips(rng, data, 1)
    if kind == "bit_flips":
        return _bit_flips(rng, data, rng.randint(2, 16))
    if kind == "header_bytes":
        return _header_bytes(rng, data)
    if kind == "random_run":
        return _random_run(rng, data)
    if kind == "segment_edit":
        return _segment_edit(rng, data)
    if kind == "sof_dims":
        return _sof_dims(rng, data)
    if kind == "insert_marker":
        return _insert_marker(rng, data)
    if kind == "splice":
        return _splice(rng, data, base(rng.choice(list(_GENERATED))))
    if kind == "app1_bytes":
        return _app1_bytes(rng, data)
    # stacked: two or three of the above in a row
    for _ in range(rng.randint(2, 3)):
        data = mutate(rng, rng.choice(MUTATIONS[:-1]), data)
        if not data:
            break
    return data
