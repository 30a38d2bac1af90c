"""The JPEGs of the photo tests: real ones when CUSTOM_OP_TEST_DATA has them, else generated ones.

Real photos are not in the repository. CUSTOM_OP_TEST_DATA (default: ../shared/data beside the checkout,
where our own machines keep them) names either

- a folder holding ``imagenet-sample/`` (photos) and/or ``odd-jpegs/`` (small files with unusual
  properties, used by name), as ../shared/data does; or
- any other folder of JPEGs: the files named ``*.jpg`` / ``*.jpeg`` (in any case) under it, searched
  recursively, take imagenet-sample/'s place (at most MAX_PHOTOS of them, spread evenly over the sorted
  paths); the odd files are then generated.

``none`` (or an empty value) hides the real photos: the run our users get.

Without real photos the tests run on generated files (`write_photo_set`, `write_odd_stand_ins`): photo-like
pixels (datasets.synthetic, the step-time tool's generator) encoded by tests/jpeg_writer.c in every
sampling, size class, coding and restart layout the real photos have and more, with EXIF orientations
and prepared (random-access) copies. The reference for exactness is Pillow (the same libjpeg-turbo), as
for the real photos.
"""

from __future__ import annotations

import os
import struct
from functools import cache
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

import jpeg_factory

ENV = "CUSTOM_OP_TEST_DATA"
DEFAULT_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PHOTOS_DIR, ODD_DIR = "imagenet-sample", "odd-jpegs"
MAX_PHOTOS = 200
JPEG_SUFFIXES = (".jpg", ".jpeg")


def data_root() -> Optional[Path]:
    """The folder CUSTOM_OP_TEST_DATA names (default ../shared/data), or None for "none" or empty."""
    value = os.environ.get(ENV)
    if value is None:
        return DEFAULT_ROOT
    if value.strip().lower() in ("", "none"):
        return None
    return Path(value).expanduser()


def _is_structured(root: Path) -> bool:
    return (root / PHOTOS_DIR).is_dir() or (root / ODD_DIR).is_dir()


def _jpegs_under(folder: Path) -> list[Path]:
    """The JPEGs under folder, hidden files and folders (".name") left out."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.suffix.lower() in JPEG_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
        and p.is_file()
    )


def spread(paths: list[Path], n: int) -> list[Path]:
    """At most n of the paths, evenly spaced, in order."""
    if len(paths) <= n:
        return paths
    return [paths[i * len(paths) // n] for i in range(n)]


@cache
def real_photos() -> tuple[Path, ...]:
    """The real photos: <root>/imagenet-sample's JPEGs, or those of a plain folder; () when there are none."""
    root = data_root()
    if root is None or not root.is_dir():
        return ()
    if _is_structured(root):
        folder = root / PHOTOS_DIR
        if not folder.is_dir():
            return ()
        return tuple(spread(sorted(p for p in folder.iterdir() if p.suffix.lower() in JPEG_SUFFIXES), MAX_PHOTOS))
    return tuple(spread(_jpegs_under(root), MAX_PHOTOS))


def real_odd_dir() -> Optional[Path]:
    """<root>/odd-jpegs when it exists, else None (a plain folder has no odd files by name)."""
    root = data_root()
    if root is None:
        return None
    folder = root / ODD_DIR
    return folder if folder.is_dir() else None


# ---------------------------------------------------------------------------------------------------
# Pixels


@cache
def _rgb(height: int, width: int, seed: int) -> np.ndarray:
    try:
        from datasets.synthetic import photo_like  # the step-time tool's generator: the more photo-like
    except ImportError:  # its dependencies (tqdm) missing: the factory's simpler one
        return jpeg_factory.photo_like(height, width, 3, seed=seed)
    return photo_like(height, width, seed)


def pixels(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Photo-like pixels: RGB (H, W, 3), its luma (H, W) for channels=1, or a CMYK rendering (H, W, 4)."""
    rgb = _rgb(height, width, seed)
    if channels == 3:
        return rgb
    if channels == 1:
        luma = rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        return np.clip(luma + 0.5, 0, 255).astype(np.uint8)
    cmy = 255 - rgb
    k = cmy.min(axis=2, keepdims=True)
    return np.concatenate([cmy - k // 2, k], axis=2).astype(np.uint8)


# ---------------------------------------------------------------------------------------------------
# Markers added after encoding


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes((0xFF, marker)) + struct.pack(">H", len(payload) + 2) + payload


def _after_app0(data: bytes) -> int:
    """Where a segment goes after SOI and the JFIF APP0, if any (as cameras write EXIF)."""
    if data[2:4] == b"\xff\xe0":
        return 4 + struct.unpack(">H", data[4:6])[0]
    return 2


def _insert(data: bytes, at: int, segment: bytes) -> bytes:
    return data[:at] + segment + data[at:]


def exif_segment(orientation: Optional[int] = None, gps: bool = False) -> bytes:
    from PIL import Image

    exif = Image.Exif()
    exif[0x010F] = "custom_op tests"  # Make
    if orientation is not None:
        exif[0x0112] = orientation
    if gps:
        info = exif.get_ifd(0x8825)
        info[1], info[2] = "N", (48.0, 51.0, 29.0)
    payload = exif.tobytes()
    if not payload.startswith(b"Exif\x00\x00"):
        payload = b"Exif\x00\x00" + payload
    return _segment(0xE1, payload)


def with_exif(data: bytes, orientation: Optional[int] = None, gps: bool = False) -> bytes:
    return _insert(data, _after_app0(data), exif_segment(orientation, gps))


def with_comment(data: bytes, text: bytes) -> bytes:
    return _insert(data, _after_app0(data), _segment(0xFE, text))


def _icc_chunk(profile: bytes) -> bytes:
    return _segment(0xE2, b"ICC_PROFILE\x00\x01\x01" + profile)


def with_icc_after_sof(data: bytes) -> bytes:
    """An ICC APP2 before the tables and another between the frame header and the Huffman tables."""
    import jpeg_markers as jm

    profile = bytes(range(128))
    data = _insert(data, _after_app0(data), _icc_chunk(profile))
    sof = jm.find(data, jm.SOF)
    return _insert(data, sof.offset + sof.length, _icc_chunk(profile))


# ---------------------------------------------------------------------------------------------------
# The generated photo set


class Recipe(NamedTuple):
    name: str
    height: int
    width: int
    channels: int = 3
    seed: int = 0
    encode: tuple = ()  # jpeg_factory.encode's keyword arguments, as (key, value) pairs
    orientation: Optional[int] = None  # an EXIF orientation added after encoding
    prepared: Optional[int] = None  # custom_op.prepare_jpeg's restart_mcus (0: its default)


def _r(name, height, width, channels=3, seed=0, orientation=None, prepared=None, **encode):
    return Recipe(name, height, width, channels, seed, tuple(sorted(encode.items())), orientation, prepared)


# ImageNet-like photos (about 500x375 either way up, as most of imagenet-sample; one 2000x1500), in every
# sampling, coding and restart layout, with EXIF orientations and prepared copies.
PHOTO_RECIPES = [
    _r("420-375x500-q90", 375, 500, seed=1),
    _r("444-333x500-q95", 333, 500, seed=2, sampling="4:4:4", quality=95),
    _r("422-500x375-optimized", 500, 375, seed=3, sampling="4:2:2", optimize=True),
    _r("420-500x333-q75-progressive", 500, 333, seed=4, quality=75, progressive=True),
    _r("440-375x500", 375, 500, seed=5, sampling="4:4:0"),
    _r("411-333x500", 333, 500, seed=6, sampling="4:1:1"),
    _r("gray-375x500", 375, 500, 1, seed=7),
    _r("cmyk-375x500", 375, 500, 4, seed=8, sampling="4:4:4"),
    _r("ycck-333x500-subsampled", 333, 500, 4, seed=9, color_space="ycck", sampling="2x2,1x1,1x1,2x2"),
    _r("rgb-stored-375x500", 375, 500, seed=10, color_space="rgb", sampling="4:4:4"),
    _r("420-375x500-restart-1", 375, 500, seed=11, restart_interval=1),
    _r("422-375x500-restart-7", 375, 500, seed=12, sampling="4:2:2", restart_interval=7),
    _r("444-500x375-restart-row", 500, 375, seed=13, sampling="4:4:4", restart_rows=1),
    _r("420-333x500-progressive-restart-2-rows", 333, 500, seed=14, progressive=True, restart_rows=2),
    _r("411-375x500-restart-5", 375, 500, seed=15, sampling="4:1:1", restart_interval=5),
    _r("420-375x500-arithmetic", 375, 500, seed=16, arithmetic=True),
    _r("420-375x500-exif-6", 375, 500, seed=17, orientation=6),
    _r("422-500x375-exif-3", 500, 375, seed=18, sampling="4:2:2", orientation=3),
    _r("444-375x500-progressive-exif-8", 375, 500, seed=19, sampling="4:4:4", progressive=True, orientation=8),
    _r("420-427x640-q85", 427, 640, seed=20, quality=85),
    _r("gray-333x500-progressive", 333, 500, 1, seed=21, progressive=True),
    _r("420-1500x2000", 1500, 2000, seed=22),
    _r("420-375x500-prepared", 375, 500, seed=1, prepared=0),
    _r("444-333x500-progressive-prepared", 333, 500, seed=2, sampling="4:4:4", progressive=True, prepared=0),
    _r("gray-375x500-prepared-3", 375, 500, 1, seed=7, prepared=3),
    _r("411-333x500-prepared", 333, 500, seed=6, sampling="4:1:1", prepared=0),
    _r("420-375x500-exif-6-prepared", 375, 500, seed=17, orientation=6, prepared=0),
    _r("440-500x375-prepared-row", 500, 375, seed=23, sampling="4:4:0", prepared=65535),
]

# Small and odd sizes (not multiples of the MCU, down to 1x1).
SMALL_RECIPES = [
    _r("420-1x1", 1, 1, seed=30),
    _r("420-7x13", 7, 13, seed=31),
    _r("422-13x7", 13, 7, seed=32, sampling="4:2:2"),
    _r("411-17x9", 17, 9, seed=33, sampling="4:1:1"),
    _r("440-9x17", 9, 17, seed=34, sampling="4:4:0"),
    _r("gray-61x47", 61, 47, 1, seed=35),
    _r("gray-1x1-progressive", 1, 1, 1, seed=36, progressive=True),
    _r("cmyk-31x45", 31, 45, 4, seed=37, sampling="4:4:4"),
    _r("420-127x255-restart-3", 127, 255, seed=38, restart_interval=3),
    _r("420-149x227", 149, 227, seed=39),
    _r("444-212x300-progressive", 212, 300, seed=40, sampling="4:4:4", progressive=True),
    _r("422-160x240-restart-row", 160, 240, seed=41, sampling="4:2:2", restart_rows=1),
    _r("420-45x70-exif-5-prepared", 45, 70, seed=42, orientation=5, prepared=0),
    _r("444-1x37", 1, 37, seed=43, sampling="4:4:4"),
]


def _interleaved(big: list, small: list) -> list:
    """Two photos to one small file until the small ones run out: any stride over the set meets both."""
    out, small = [], list(small)
    for i, recipe in enumerate(big):
        out.append(recipe)
        if i % 2 == 1 and small:
            out.append(small.pop(0))
    return out + small


RECIPES = _interleaved(PHOTO_RECIPES, SMALL_RECIPES)


def build(recipe: Recipe) -> bytes:
    data = jpeg_factory.encode(pixels(recipe.height, recipe.width, recipe.channels, recipe.seed), **dict(recipe.encode))
    if recipe.orientation is not None:
        data = with_exif(data, recipe.orientation)
    if recipe.prepared is not None:
        import custom_op

        options = {"restart_mcus": recipe.prepared} if recipe.prepared else {}
        data = custom_op.prepare_jpeg(data, **options)
    return data


def write_photo_set(folder: Path) -> tuple[Path, ...]:
    """The generated photo set written to folder (a flat folder of .jpg files), in RECIPES' order: the
    files' names sort in that order. Needs the JPEG writer (jpeg_factory.FactoryUnavailable otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, recipe in enumerate(RECIPES):
        path = folder / f"{i:02d}-{recipe.name}.jpg"
        path.write_bytes(build(recipe))
        paths.append(path)
    _rgb.cache_clear()
    return tuple(paths)


# ---------------------------------------------------------------------------------------------------
# Stand-ins for odd-jpegs/: the same names, sizes and the properties the tests rely on


def _odd(height, width, channels=3, seed=0, **encode) -> bytes:
    return jpeg_factory.encode(pixels(height, width, channels, seed), **encode)


def _truncated_progressive() -> bytes:
    data = _odd(100, 100, seed=58, progressive=True)
    return data[: len(data) * 2 // 3]  # inside a later scan: libjpeg warns "Premature end of JPEG file"


ODD_STAND_INS = {
    "exif_gps.jpg": lambda: with_exif(_odd(8, 8, seed=50), gps=True),
    "flower.jpg": lambda: with_exif(_odd(360, 480, seed=51), orientation=1),
    "hopper.jpg": lambda: with_comment(_odd(128, 128, seed=52), b"custom_op tests"),
    "hopper_gray.jpg": lambda: _odd(128, 128, 1, seed=53),
    "hopper_orientation_3.jpg": lambda: with_exif(_odd(128, 128, seed=54), orientation=3),
    "hopper_orientation_6.jpg": lambda: with_exif(_odd(128, 128, seed=55), orientation=6),
    "icc-after-SOF.jpg": lambda: with_icc_after_sof(_odd(10, 10, 1, seed=56)),
    "pil_sample_cmyk.jpg": lambda: with_exif(
        _odd(100, 100, 4, seed=57, color_space="ycck", sampling="4:4:4", restart_interval=13), orientation=1
    ),
    "testimgint.jpg": lambda: _odd(149, 227, seed=59, quality=75),
    "testorig.jpg": lambda: _odd(149, 227, seed=60, quality=90),
    "truncated_jpeg.jpg": _truncated_progressive,
}


def write_odd_stand_ins(folder: Path) -> Path:
    """Generated files under odd-jpegs/'s names, written to folder, which is returned."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, make in ODD_STAND_INS.items():
        (folder / name).write_bytes(make())
    return folder
