"""Test-side JPEG factory: encode numpy pixels with options Pillow cannot write, and make photo-like pixels.

`encode` drives tests/jpeg_writer.c (libjpeg's compression API), compiled once per source version into a
cache directory: $CUSTOM_OP_JPEG_WRITER_DIR, which the tests' conftest.py points into pytest's temporary
folder for the session (so a test run leaves nothing behind outside it); when unset, as for the fuzz
scripts run by hand, a per-user cache beside the project's others, <root>/custom_op/jpeg_writer with
root $CUSTOM_OP_CACHE_DIR, else $XDG_CACHE_HOME, else ~/.cache. It is built against the libjpeg-turbo the
extension's build finds (custom_op/_jpeg_paths.py: $CUSTOM_OP_JPEG_PREFIX, $CONDA_PREFIX, the system), so that
whoever can build the extension can build it; else against the compiler's default libjpeg. When no C compiler or
no jpeglib.h is available, `encode` raises FactoryUnavailable; tests turn that into a skip (see
`unavailable_reason`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

__all__ = [
    "FactoryUnavailable",
    "cache_dir",
    "encode",
    "photo_like",
    "unavailable_reason",
    "with_exif_orientation",
    "writer_path",
    "SAMPLING_NAMES",
]

_SOURCE = Path(__file__).with_name("jpeg_writer.c")
_CACHE_ENV = "CUSTOM_OP_JPEG_WRITER_DIR"

# Luma factors of the usual names; chroma components are always 1x1. Written as Y factors so that the
# name means the same ratio for any number of chroma components.
SAMPLING_NAMES = {
    "4:4:4": "1x1",
    "4:2:2": "2x1",
    "4:2:0": "2x2",
    "4:4:0": "1x2",
    "4:1:1": "4x1",
}
_DEFAULT_COLOR_SPACE = {1: "gray", 3: "ycbcr", 4: "cmyk"}
_COLOR_SPACES = ("gray", "ycbcr", "rgb", "cmyk", "ycck")


class FactoryUnavailable(RuntimeError):
    """The JPEG writer cannot be built here (no C compiler or no libjpeg headers/library)."""


_writer: Path | None = None
_writer_error: str | None = None


def cache_dir() -> Path:
    """Where the compiled writer lives (see the module's docstring)."""
    configured = os.environ.get(_CACHE_ENV)
    if configured:
        return Path(configured)
    base = (
        os.environ.get("CUSTOM_OP_CACHE_DIR")
        or os.environ.get("XDG_CACHE_HOME")
        or os.path.join(os.path.expanduser("~"), ".cache")
    )
    return Path(base).expanduser() / "custom_op" / "jpeg_writer"


def _find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _jpeg_flags() -> list[str]:
    """Compiler and linker flags for the libjpeg-turbo the extension uses, or plain -ljpeg when none is found."""
    spec = importlib.util.spec_from_file_location(
        "_tests_jpeg_paths", Path(__file__).resolve().parents[1] / "custom_op" / "_jpeg_paths.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        found = module.find_libjpeg_turbo()
    except module.LibjpegTurboNotFound:
        return ["-ljpeg"]
    flags = [f"-I{d}" for d in found.include_dirs] + [f"-L{d}" for d in found.library_dirs]
    return flags + [f"-Wl,-rpath,{d}" for d in found.rpath_dirs] + [f"-l{name}" for name in found.libraries]


def writer_path() -> Path:
    """Path of the compiled writer, building it if this source version has not been built yet."""
    global _writer, _writer_error
    if _writer is not None:
        return _writer
    if _writer_error is not None:
        raise FactoryUnavailable(_writer_error)

    compiler = _find_compiler()
    if compiler is None:
        _writer_error = "no C compiler (cc/gcc/clang, or $CC) found to build tests/jpeg_writer.c"
        raise FactoryUnavailable(_writer_error)
    jpeg_flags = _jpeg_flags()
    digest = hashlib.sha256(_SOURCE.read_bytes() + " ".join([compiler, *jpeg_flags]).encode()).hexdigest()[:16]
    cache = cache_dir()
    target = cache / f"jpeg_writer-{digest}"
    if target.is_file() and os.access(target, os.X_OK):
        _writer = target
        return target

    cache.mkdir(parents=True, exist_ok=True)
    # Several pytest-xdist workers or processes may build at once: each builds under its own name and
    # the atomic rename makes whichever finishes last win with an identical binary.
    fd, temp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=cache)
    os.close(fd)
    try:
        result = subprocess.run(
            [compiler, "-O2", "-o", temp_name, str(_SOURCE), *jpeg_flags],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            _writer_error = (
                "cannot build tests/jpeg_writer.c (needs a C compiler, jpeglib.h and libjpeg): "
                + result.stderr.strip()[-2000:]
            )
            raise FactoryUnavailable(_writer_error)
        os.chmod(temp_name, 0o755)
        os.replace(temp_name, target)
    finally:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
    _writer = target
    return target


def unavailable_reason() -> str | None:
    """None when `encode` works here, else why not (for pytest.skip / skipif)."""
    try:
        writer_path()
    except FactoryUnavailable as error:
        return str(error)
    return None


def _sampling_spec(sampling: str, num_jpeg_components: int) -> str:
    if sampling in SAMPLING_NAMES:
        if num_jpeg_components == 1:
            return "1x1"
        return ",".join([SAMPLING_NAMES[sampling]] + ["1x1"] * (num_jpeg_components - 1))
    return sampling


def encode(
    pixels: np.ndarray,
    *,
    color_space: str | None = None,
    sampling: str = "4:2:0",
    quality: int = 90,
    progressive: bool = False,
    restart_interval: int = 0,
    restart_rows: int = 0,
    arithmetic: bool = False,
    optimize: bool = False,
    jfif: bool | None = None,
    adobe: bool | None = None,
) -> bytes:
    """Encode uint8 pixels, shape (H, W) or (H, W, C) with C in 1, 3 (RGB) or 4 (CMYK), to JPEG bytes.

    color_space is the JPEG's color space: "gray", "ycbcr", "rgb" (stored without transform), "cmyk" or
    "ycck"; None picks gray / ycbcr / cmyk from C. sampling is a name ("4:4:4", "4:2:2", "4:2:0",
    "4:4:0", "4:1:1": luma factors, chroma 1x1) or explicit per-component factors such as
    "2x2,1x1,1x1". For gray the names all mean 1x1. restart_interval is in MCUs, restart_rows in MCU
    rows (libjpeg uses restart_rows when both are set). jfif / adobe force the APP0 / APP14 marker on or
    off; None keeps libjpeg's choice (JFIF for gray/ycbcr, Adobe for rgb/cmyk/ycck).
    Raises ValueError for a libjpeg refusal (message included), FactoryUnavailable when no writer.
    """
    array = np.asarray(pixels)
    if array.dtype != np.uint8:
        raise TypeError(f"pixels must be uint8, got {array.dtype}")
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3, 4):
        raise ValueError(f"pixels must have shape (H, W) or (H, W, 1|3|4), got {np.shape(pixels)}")
    height, width, components = array.shape
    if height < 1 or width < 1:
        raise ValueError(f"pixels must be at least 1x1, got {height}x{width}")
    space = color_space if color_space is not None else _DEFAULT_COLOR_SPACE[components]
    if space not in _COLOR_SPACES:
        raise ValueError(f"color_space must be one of {_COLOR_SPACES}, got {space!r}")
    num_jpeg_components = {"gray": 1, "ycbcr": 3, "rgb": 3, "cmyk": 4, "ycck": 4}[space]

    args = [
        str(writer_path()),
        f"--width={width}",
        f"--height={height}",
        f"--components={components}",
        f"--colorspace={space}",
        f"--sampling={_sampling_spec(sampling, num_jpeg_components)}",
        f"--quality={int(quality)}",
        f"--restart-interval={int(restart_interval)}",
        f"--restart-rows={int(restart_rows)}",
    ]
    if progressive:
        args.append("--progressive")
    if arithmetic:
        args.append("--arithmetic")
    if optimize:
        args.append("--optimize")
    if jfif is not None:
        args.append(f"--jfif={int(bool(jfif))}")
    if adobe is not None:
        args.append(f"--adobe={int(bool(adobe))}")

    result = subprocess.run(args, input=np.ascontiguousarray(array).tobytes(), capture_output=True)
    if result.returncode != 0:
        raise ValueError(result.stderr.decode(errors="replace").strip() or f"jpeg_writer exited {result.returncode}")
    return result.stdout


def photo_like(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Deterministic uint8 image, (H, W) for channels=1 else (H, W, channels), that codes like a photo.

    Smooth gradients and low-frequency waves (what most of a photo is), a few flat shapes with hard edges
    (what makes ringing and chroma bleeding), and a fine texture plus mild noise (what keeps the entropy
    coder busy), rather than uniform noise, which no real JPEG looks like. Numpy only; well under a second
    at 4000x3000.
    """
    if height < 1 or width < 1 or channels < 1:
        raise ValueError(f"need height, width, channels >= 1, got {height}, {width}, {channels}")
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]

    # The texture tile is small and repeated: tiling keeps the cost at one pass over the image.
    tile = rng.normal(0.0, 4.0, size=(min(height, 61), min(width, 67))).astype(np.float32)
    reps = (-(-height // tile.shape[0]), -(-width // tile.shape[1]))

    out = np.empty((height, width, channels), dtype=np.uint8)
    shapes = []
    for _ in range(4):
        top, left = int(rng.integers(0, height)), int(rng.integers(0, width))
        h = max(1, int(rng.integers(height // 8 + 1, height // 3 + 2)))
        w = max(1, int(rng.integers(width // 8 + 1, width // 3 + 2)))
        shapes.append((bool(rng.integers(0, 2)), top, left, h, w))
    shape_values = rng.uniform(20.0, 235.0, size=(len(shapes), channels)).astype(np.float32)
    gradients = rng.uniform(-90.0, 90.0, size=(channels, 2)).astype(np.float32)
    bases = rng.uniform(70.0, 180.0, size=channels).astype(np.float32)
    waves = rng.uniform(2.0, 9.0, size=(channels, 2)).astype(np.float32)
    texture = np.tile(tile, reps)[:height, :width]

    for c in range(channels):
        plane = bases[c] + gradients[c, 0] * y + gradients[c, 1] * x
        plane = plane + 25.0 * np.sin(waves[c, 0] * y + 1.3 * c) * np.cos(waves[c, 1] * x)
        for k, (is_ellipse, top, left, h, w) in enumerate(shapes):
            box = plane[top : top + h, left : left + w]
            if is_ellipse:
                yy = (np.arange(box.shape[0], dtype=np.float32)[:, None] - h / 2) / (h / 2)
                xx = (np.arange(box.shape[1], dtype=np.float32)[None, :] - w / 2) / (w / 2)
                box[yy * yy + xx * xx <= 1.0] = shape_values[k, c]
            else:
                box[...] = shape_values[k, c]
        plane += texture if c % 2 == 0 else texture[::-1, ::-1]
        np.clip(plane, 0.0, 255.0, out=plane)
        out[:, :, c] = plane
    return out[:, :, 0] if channels == 1 else out


def with_exif_orientation(data: bytes, orientation: int) -> bytes:
    """The JPEG `data` with an EXIF APP1 segment holding `orientation` (1..8) inserted after SOI."""
    import struct

    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = orientation
    payload = exif.tobytes()
    if not payload.startswith(b"Exif\x00\x00"):
        payload = b"Exif\x00\x00" + payload
    return data[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + data[2:]
