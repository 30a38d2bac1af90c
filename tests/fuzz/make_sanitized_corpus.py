"""Seed files for tests/fuzz/sanitized_decode.cpp, written into a folder (run_sanitized.sh calls this).

Generated with tests/jpeg_factory.py (every layout the entropy decoder and the two fast paths treat
differently: subsamplings, component counts, restart intervals, progressive and arithmetic coding,
optimized tables, sizes that are not MCU multiples), plus custom_op.prepare_jpeg outputs when the
package imports, plus real files from ../shared/data when present (read by path, never copied into
the repository).

    python tests/fuzz/make_sanitized_corpus.py OUT_DIR [--small] [--no-prepared] [--real N]

--small writes a few dozen small files (the pytest run); --real N takes N ImageNet photos (default 12).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for jpeg_factory

import jpeg_factory  # noqa: E402

SHARED_DATA = Path(os.environ.get("CUSTOM_OP_TEST_DATA", HERE.parents[2] / "shared" / "data"))

SUBSAMPLINGS = ("4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "1x2,2x1,1x1")
# Sizes that are not MCU multiples, and the degenerate ones (one MCU, one MCU row or column).
ODD_SIZES = ((1, 1), (7, 300), (300, 7), (61, 47))


def restart_options(mcus_per_row: int):
    """Restart settings: none, 1, 2, 3 MCUs, one MCU row, and a little more than a row (the random-access
    layouts are those with an interval of at most the MCUs per row, segments running from one row into
    the next where it does not divide them; the others must be left to the ordinary path)."""
    yield "rst0", {}
    for interval in (1, 2, 3):
        yield f"rst{interval}", {"restart_interval": interval}
    yield "rstrow", {"restart_rows": 1}
    if mcus_per_row > 4 and mcus_per_row % 2 == 0:
        yield "rsthalfrow", {"restart_interval": mcus_per_row // 2}
    yield "rstrowplus", {"restart_interval": mcus_per_row + 1}


def mcu_columns(width: int, sampling: str) -> int:
    h = int(jpeg_factory.SAMPLING_NAMES.get(sampling, sampling.split(",")[0]).split("x")[0])
    return -(-width // (8 * h))


def generated(small: bool):
    """(name, bytes) of generated files."""
    size = (40, 56) if small else (77, 101)
    for sampling in SUBSAMPLINGS:
        pixels = jpeg_factory.photo_like(*size, 3, seed=len(sampling))
        tag = sampling.replace(":", "").replace(",", "_")
        for rst, options in restart_options(mcu_columns(size[1], sampling)):
            if small and rst not in ("rst0", "rst1", "rstrow"):
                continue
            yield f"ycc_{tag}_{rst}.jpg", jpeg_factory.encode(pixels, sampling=sampling, **options)
        yield (
            f"ycc_{tag}_optimized_rst2.jpg",
            jpeg_factory.encode(pixels, sampling=sampling, optimize=True, restart_interval=2),
        )
        if not small:
            yield f"ycc_{tag}_q100.jpg", jpeg_factory.encode(pixels, sampling=sampling, quality=100)
            yield (
                f"ycc_{tag}_q10_rstrow.jpg",
                jpeg_factory.encode(pixels, sampling=sampling, quality=10, restart_rows=1),
            )
    gray = jpeg_factory.photo_like(*size, 1, seed=7)
    for rst, options in restart_options(-(-size[1] // 8)):
        yield f"gray_{rst}.jpg", jpeg_factory.encode(gray, **options)
    cmyk = jpeg_factory.photo_like(*size, 4, seed=8)
    yield "cmyk_444.jpg", jpeg_factory.encode(cmyk, sampling="4:4:4")
    yield "cmyk_444_rst1.jpg", jpeg_factory.encode(cmyk, sampling="4:4:4", restart_interval=1)
    yield "ycck_420.jpg", jpeg_factory.encode(cmyk, color_space="ycck")
    yield "ycck_420_rstrow.jpg", jpeg_factory.encode(cmyk, color_space="ycck", restart_rows=1)
    rgb = jpeg_factory.photo_like(*size, 3, seed=9)
    yield "rgb_444.jpg", jpeg_factory.encode(rgb, color_space="rgb", sampling="4:4:4")
    yield "rgb_444_rst3.jpg", jpeg_factory.encode(rgb, color_space="rgb", sampling="4:4:4", restart_interval=3)
    yield "progressive_420.jpg", jpeg_factory.encode(rgb, progressive=True)
    yield "progressive_rstrow.jpg", jpeg_factory.encode(rgb, progressive=True, restart_rows=1)
    yield "arithmetic_420.jpg", jpeg_factory.encode(rgb, arithmetic=True)
    yield "arithmetic_rst1.jpg", jpeg_factory.encode(rgb, arithmetic=True, restart_interval=1)
    yield "optimized_444.jpg", jpeg_factory.encode(rgb, sampling="4:4:4", optimize=True)
    for height, width in ODD_SIZES:
        pixels = jpeg_factory.photo_like(height, width, 3, seed=height + width)
        for sampling in ("4:4:4", "4:2:0", "4:1:1"):
            tag = sampling.replace(":", "")
            yield f"odd_{height}x{width}_{tag}.jpg", jpeg_factory.encode(pixels, sampling=sampling)
            yield (
                f"odd_{height}x{width}_{tag}_rst1.jpg",
                jpeg_factory.encode(pixels, sampling=sampling, restart_interval=1),
            )
        yield f"odd_{height}x{width}_gray_rstrow.jpg", jpeg_factory.encode(pixels[:, :, 0], restart_rows=1)
    if not small:
        # Big enough that windows at the bottom have hundreds of blocks above them (walked by the skip).
        big = jpeg_factory.photo_like(403, 517, 3, seed=11)
        yield "big_420.jpg", jpeg_factory.encode(big)
        yield "big_422_rstrow.jpg", jpeg_factory.encode(big, sampling="4:2:2", restart_rows=1)
        yield "big_444_rst1.jpg", jpeg_factory.encode(big, sampling="4:4:4", restart_interval=1)


def prepared(sources):
    """custom_op.prepare_jpeg of some generated files, at a few restart intervals; nothing when the
    package does not import here."""
    try:
        import custom_op
    except Exception as error:  # not built, no torch: the corpus does without these
        print(f"make_sanitized_corpus: no prepare_jpeg outputs ({type(error).__name__}: {error})", file=sys.stderr)
        return
    for name, data in sources:
        for restart_mcus in (None, 1, 4):
            try:
                out = custom_op.prepare_jpeg(data, restart_mcus=restart_mcus)
            except (RuntimeError, ValueError):
                continue  # progressive-incomplete or otherwise refused: nothing to add
            yield f"prepared_{restart_mcus or 'auto'}_{name}", out


def real_files(count: int):
    """Paths of real JPEGs under ../shared/data (odd-jpegs, then `count` ImageNet photos)."""
    odd = SHARED_DATA / "odd-jpegs"
    if odd.is_dir():
        yield from sorted(p for p in odd.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    imagenet = SHARED_DATA / "imagenet-sample"
    if imagenet.is_dir() and count > 0:
        yield from sorted(imagenet.iterdir())[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--small", action="store_true", help="a few dozen small files (quick runs)")
    parser.add_argument("--no-prepared", action="store_true", help="leave out custom_op.prepare_jpeg outputs")
    parser.add_argument("--real", type=int, default=12, help="ImageNet photos to take from ../shared/data")
    args = parser.parse_args()

    reason = jpeg_factory.unavailable_reason()
    if reason is not None:
        print(f"make_sanitized_corpus: cannot build the JPEG writer: {reason}", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    files = list(generated(args.small))
    if not args.no_prepared:
        picked = [
            f
            for f in files
            if f[0].endswith("_rst0.jpg")
            or f[0].startswith(("big_420", "odd_61x47_420.jpg", "cmyk_444.jpg", "progressive_420"))
        ]
        files += list(prepared(picked[:4] if args.small else picked))
    for name, data in files:
        (args.out_dir / name).write_bytes(data)
    count = len(files)
    for path in real_files(0 if args.small else args.real):
        # Copied to the scratch folder (outside the repository) so the harness sees one flat folder.
        shutil.copyfile(path, args.out_dir / f"real_{path.parent.name}_{path.name}")
        count += 1
    print(f"make_sanitized_corpus: {count} files in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
