"""Synthetic photo-like JPEG data sets, generated once into a cache directory.

Uniform noise is the wrong stand-in for photos: no real data set looks like it, its entropy-coded size
is several times a photo's, and it makes every decoder look slow. The generator below instead composes
what a JPEG codec sees in a photo: smooth gradients (sky, walls), regions with hard curved and straight
edges (objects), region-dependent texture (grass, fabric) and fine sensor grain. Its files land near the
bits per pixel of real photos at quality 90 with 4:2:0 chroma subsampling, the default a camera or an
ImageNet-style file has.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from .folder import JPEG_SUFFIXES

# Part of the cache directory name: bump it whenever the pixels the generator makes change, so that a
# cache written by an older generator is never reused as if it were the new one.
GENERATOR_VERSION = 1

JPEG_QUALITY = 90
# Pillow's `subsampling=2` is 4:2:0.
JPEG_SUBSAMPLING = 2

_COMPLETE_MARKER = ".complete.json"
# A prepared copy's own marker: the set's marker is copied into it with the other files, whenever the
# copy gets to it, so it cannot tell a finished copy.
_PREPARED_MARKER = ".prepared.json"


def _interp_matrix(n_out: int, n_in: int) -> np.ndarray:
    """Matrix (n_out, n_in), float64, that linearly interpolates n_in control points over n_out samples."""
    pos = np.linspace(0.0, n_in - 1, n_out)
    lo = np.minimum(pos.astype(np.int64), n_in - 2) if n_in > 1 else np.zeros(n_out, np.int64)
    frac = pos - lo
    m = np.zeros((n_out, n_in), dtype=np.float64)
    rows = np.arange(n_out)
    if n_in == 1:
        m[:, 0] = 1.0
        return m
    m[rows, lo] = 1.0 - frac
    m[rows, lo + 1] = frac
    return m


class _SmoothField:
    """A field of `channels` planes in about [-1, 1] that varies smoothly at the scale h/gh x w/gw.

    It upsamples a tiny random grid with two interpolation matrices; rows(a, b) evaluates only rows
    a..b, so the image is built strip by strip in cache-sized pieces.
    """

    def __init__(self, rng: np.random.Generator, h: int, w: int, gh: int, gw: int, channels: int):
        grid = rng.uniform(-1.0, 1.0, size=(channels, gh, gw))
        # Contract the height side last (per strip), the width side now: (channels, gh, w).
        # float64 on purpose: numpy's bundled OpenBLAS is ~25x slower on these tiny-K float32 products.
        self._gw_to_w = grid @ _interp_matrix(w, gw).T
        self._ah = _interp_matrix(h, gh)

    def rows(self, a: int, b: int) -> np.ndarray:
        ah = self._ah[a:b]
        return np.stack([(ah @ plane).astype(np.float32) for plane in self._gw_to_w])


# Rows per strip: a multiple of the texture cell (3) so cells never straddle strips; ~200 rows of a
# 4000-wide image keep every temporary array of a strip in a few MB.
_STRIP = 192
_TEXTURE_CELL = 3


def photo_like(height: int, width: int, seed: int) -> np.ndarray:
    """A deterministic photo-like RGB image as a (height, width, 3) uint8 array.

    The same (height, width, seed) always gives the same pixels. Features scale with the image size,
    as they do in a photo taken at a higher resolution, while texture and grain stay at the pixel scale.
    """
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    h, w = int(height), int(width)
    rng = np.random.default_rng([GENERATOR_VERSION, h, w, seed])
    aspect = w / h

    def grid(n: int) -> tuple[int, int]:
        return max(2, n), max(2, int(round(n * aspect)))

    # Background: broad color gradients.
    background = _SmoothField(rng, h, w, *grid(3), 3)
    # Objects: regions bounded by the level sets of a smooth field give hard, curved edges.
    shapes = _SmoothField(rng, h, w, *grid(5), 1)
    shape_detail = _SmoothField(rng, h, w, *grid(13), 1)
    n_levels = 6
    # Straight edges (buildings, horizons, tables) split the regions further: a line
    # cos(a)*x + sin(a)*y = offset (coordinates in [-0.5, 0.5]) becomes a boundary column per row.
    lines = []
    for _ in range(2):
        angle = rng.uniform(0.25, np.pi - 0.25)  # keeps cos(a) away from 0
        lines.append((np.cos(angle), np.sin(angle), rng.uniform(-0.3, 0.3)))
    n_regions = n_levels * 4
    # Region colors differ mostly in brightness, less in hue, as in photos (and as subsampled chroma expects).
    luma = rng.uniform(-55.0, 55.0, size=n_regions)
    palette = (luma + rng.uniform(-25.0, 25.0, size=(3, n_regions))).astype(np.float32)
    # Texture strength per region: some regions stay smooth (sky), others are busy (grass, fabric).
    texture_amp = rng.choice(np.array([0.0, 4.0, 10.0, 18.0], dtype=np.float32), size=n_regions)
    # Lighting: a smooth brightness field over everything.
    shade_field = _SmoothField(rng, h, w, *grid(2), 1)
    noise_seed = int(rng.integers(2**63))

    out = np.empty((h, w, 3), dtype=np.uint8)
    xx = ((np.arange(w, dtype=np.float64) / w) - 0.5)[None, :]
    cell = _TEXTURE_CELL
    for a in range(0, h, _STRIP):
        b = min(h, a + _STRIP)
        img = 128.0 + 60.0 * background.rows(a, b)
        f = shapes.rows(a, b)[0] + 0.35 * shape_detail.rows(a, b)[0]
        region = np.clip(((f + 1.3) * (n_levels / 2.6)).astype(np.int32), 0, n_levels - 1)
        yy = ((np.arange(a, b, dtype=np.float64) / h) - 0.5)[:, None]
        for bit, (cos_a, sin_a, offset) in enumerate(lines):
            boundary = (offset - sin_a * yy) / cos_a
            side = (xx > boundary) if cos_a > 0 else (xx < boundary)
            region += side.astype(np.int32) * (n_levels << bit)
        # Each strip has its own noise stream, so the pixels do not depend on how many strips came before.
        noise = np.random.default_rng([noise_seed, a])
        # Texture a few pixels across: noise at 1/3 of the resolution, repeated.
        tex = noise.standard_normal((-(-(b - a) // cell), -(-w // cell)), dtype=np.float32)
        tex = np.repeat(np.repeat(tex, cell, axis=0), cell, axis=1)[: b - a, :w]
        tex *= texture_amp[region]
        # Sensor grain at the pixel scale, mostly luminance as in a camera.
        tex += 2.0 * noise.standard_normal((b - a, w), dtype=np.float32)
        shade = 1.0 + 0.25 * shade_field.rows(a, b)[0]
        for c in range(3):
            plane = img[c]
            plane += palette[c][region]
            plane += tex
            plane *= shade
            np.clip(plane, 0.0, 255.0, out=plane)
            out[a:b, :, c] = plane
    return out


def encode_jpeg(pixels: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    """JPEG bytes of an (H, W, 3) uint8 array: baseline, 4:2:0, no Huffman optimization (camera-like)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels, mode="RGB").save(buf, format="JPEG", quality=quality, subsampling=JPEG_SUBSAMPLING)
    return buf.getvalue()


def default_cache_dir() -> Path:
    """Where generated sets live: <root>/custom_op/datasets, beside custom_op's build cache.

    root is $CUSTOM_OP_CACHE_DIR (the variable custom_op's build cache uses), else $XDG_CACHE_HOME,
    else ~/.cache.
    """
    base = (
        os.environ.get("CUSTOM_OP_CACHE_DIR")
        or os.environ.get("XDG_CACHE_HOME")
        or os.path.join(os.path.expanduser("~"), ".cache")
    )
    return Path(base).expanduser() / "custom_op" / "datasets"


def synthetic_set_dir(
    num_images: int,
    height: int,
    width: int,
    *,
    seed: int = 0,
    num_classes: int = 10,
    quality: int = JPEG_QUALITY,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """The cache directory of the set with these parameters (which need not exist yet)."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    name = f"synthetic-v{GENERATOR_VERSION}-{height}x{width}-n{num_images}-c{num_classes}-q{quality}-s{seed}"
    return base / name


def _atomic_write(path: Path, data: bytes) -> None:
    # Write to a temporary file in the same folder, then rename: a reader (or a run interrupted halfway)
    # never sees a partial JPEG under the final name.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def image_path(root: Path, index: int, num_classes: int) -> Path:
    """Path of image `index` in the ImageFolder layout root/class_KKK/img_NNNNNN.jpg; its label is
    index % num_classes."""
    return root / f"class_{index % num_classes:03d}" / f"img_{index:06d}.jpg"


def make_synthetic_set(
    num_images: int = 256,
    height: int = 533,
    width: int = 800,
    *,
    seed: int = 0,
    num_classes: int = 10,
    quality: int = JPEG_QUALITY,
    cache_dir: str | os.PathLike | None = None,
    show_progress: bool = True,
) -> Path:
    """Generate (once) a set of photo-like JPEGs in ImageFolder layout and return its root folder.

    Image i is `photo_like(height, width, seed=(seed, i))` in class folder class_{i % num_classes}.
    A finished set is marked complete and reused by later calls with the same parameters; an
    interrupted one is completed (files already written are kept). Concurrent callers are serialized
    with a file lock, and every file is written atomically.
    """
    if num_images < 1:
        raise ValueError(f"num_images must be >= 1, got {num_images}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    root = synthetic_set_dir(
        num_images, height, width, seed=seed, num_classes=num_classes, quality=quality, cache_dir=cache_dir
    )

    def generate() -> dict:
        for k in range(min(num_classes, num_images)):
            (root / f"class_{k:03d}").mkdir(exist_ok=True)
        todo = [i for i in range(num_images) if not image_path(root, i, num_classes).is_file()]
        desc = f"generating {num_images} synthetic {height}x{width} JPEGs in {root}"
        for i in tqdm(todo, desc=desc, unit="img", file=sys.stderr, disable=not show_progress or not todo):
            pixels = photo_like(height, width, seed=_image_seed(seed, i))
            _atomic_write(image_path(root, i, num_classes), encode_jpeg(pixels, quality))
        return {
            "generator_version": GENERATOR_VERSION,
            "num_images": num_images,
            "height": height,
            "width": width,
            "seed": seed,
            "num_classes": num_classes,
            "quality": quality,
            "subsampling": "4:2:0",
        }

    return _made_once(root, _COMPLETE_MARKER, generate)


def prepared_copy(root: str | os.PathLike, *, show_progress: bool = True) -> Path:
    """A copy of the set under `root` prepared for random access (custom_op.prepare_jpeg: lossless, the
    same pixels), made once beside it as <root>-prepared and reused by later calls; an interrupted copy
    is completed (files already written are kept), and concurrent callers are serialized with a file
    lock, as for the set itself. RuntimeError when a JPEG cannot be prepared."""
    from custom_op.prepare_folder import prepare_folder

    root = Path(root)
    dst = root.with_name(root.name + "-prepared")

    def prepare() -> dict:
        if show_progress:
            print(f"preparing the JPEGs of {root} for random access into {dst}", file=sys.stderr)
        summary = prepare_folder(root, dst, quiet=not show_progress)
        for r in summary.results:
            if r.status == "left" and r.kind != "already random-access" and r.path.lower().endswith(JPEG_SUFFIXES):
                raise RuntimeError(f"could not prepare {r.path} for random access: {r.reason or r.kind}")
        return {"prepared_from": str(root)}

    return _made_once(dst, _PREPARED_MARKER, prepare)


def _made_once(folder: Path, marker_name: str, make: Callable[[], dict]) -> Path:
    """`folder`, filled by make() once: a folder holding the marker (make's dict, as JSON) is finished and
    returned as it is. Concurrent callers wait on a file lock; after an interrupted make, the next call
    runs it again, over what it wrote (make completes a partial folder)."""
    from filelock import FileLock

    marker = folder / marker_name
    if marker.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not marker.is_file():  # else another process finished it while we waited
            _atomic_write(marker, json.dumps(make(), indent=2).encode())
    return folder


def _image_seed(seed: int, index: int) -> int:
    # A single int keeps photo_like's signature simple while still separating (seed, index) pairs.
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
