"""Single-thread CPU benchmark: decode a window of a JPEG, every method on the same files and windows.

    python bench/bench_cpu_crop.py                 # all cases, prints the report (Markdown)
    python bench/bench_cpu_crop.py --out bench/results/cpu_crop.md     # also writes it, and cpu_crop.json

Methods: Pillow full decode + slice of the array, Pillow full decode with crop() before the
conversion (its cheapest path), simplejpeg full decode + slice (when installed), and
custom_op.decode_and_crop_jpeg, as shipped and with libjpeg's own Huffman decoder instead of ours
(csrc/cpu/entropy_decoder.h). Cases: 224x224 windows on ../shared/data/imagenet-sample (when
present), 256x256 windows on generated 533x800 JPEGs, 512x512 windows on generated 4000x3000 JPEGs.
Methods alternate round by round so that a slow moment of the machine hits all of them alike; the
best round of each is reported, with ratios against custom_op.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import Report, cpu_description, random_windows  # noqa: E402

import custom_op  # noqa: E402
from datasets.synthetic import make_synthetic_set  # noqa: E402


def pillow_crop(data, top, left, height, width):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[top : top + height, left : left + width]


def pillow_crop_first(data, top, left, height, width):
    # Pillow's cheapest path to a window: crop() before any conversion or copy to numpy. It still
    # decodes every pixel (a JPEG has no random access); it only skips the copies of the whole image.
    return np.asarray(Image.open(io.BytesIO(data)).crop((left, top, left + width, top + height)).convert("RGB"))


def simplejpeg_crop(data, top, left, height, width):
    import simplejpeg

    return simplejpeg.decode_jpeg(data, colorspace="RGB")[top : top + height, left : left + width]


def custom_op_crop(data, top, left, height, width):
    return custom_op.decode_and_crop_jpeg(data, top, left, height, width)


def custom_op_libjpeg_huffman(data, top, left, height, width):
    return custom_op.decode_and_crop_jpeg(data, top, left, height, width)


# Process-wide knobs set around the timed loop of a method (not per call): (setter, value).
KNOBS = {
    custom_op_libjpeg_huffman: (torch.ops.custom_op._set_own_entropy_decoder, False),
}


def methods():
    found = {"Pillow full + slice": pillow_crop, "Pillow full, crop() first": pillow_crop_first}
    if importlib.util.find_spec("simplejpeg") is not None:
        found["simplejpeg full + slice"] = simplejpeg_crop
    else:
        print("simplejpeg is not installed (pip install simplejpeg): skipping it", file=sys.stderr)
    found["custom_op, libjpeg's Huffman decoder"] = custom_op_libjpeg_huffman
    found["custom_op.decode_and_crop_jpeg"] = custom_op_crop
    return found


def cases(args):
    imagenet = Path(args.imagenet)
    if imagenet.is_dir():
        files = [p.read_bytes() for p in sorted(imagenet.iterdir())]
        yield f"ImageNet sample ({len(files)} photos), 224x224", files, 224
    else:
        print(f"{imagenet} is absent: skipping the ImageNet case", file=sys.stderr)
    for count, height, width, window in ((args.n_medium, 533, 800, 256), (args.n_large, 3000, 4000, 512)):
        if count == 0:
            continue
        root = make_synthetic_set(count, height, width, seed=1)
        files = [p.read_bytes() for p in sorted(root.rglob("*.jpg"))]
        yield f"generated {width}x{height} ({len(files)} files), {window}x{window}", files, window


def measure(files, windows, fns, rounds):
    per_round = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            setter, value = KNOBS.get(fn, (None, None))
            previous = setter(value) if setter is not None else None
            start = time.perf_counter()
            for data, window in zip(files, windows):
                fn(data, *window)
            per_round[name].append((time.perf_counter() - start) / len(files) * 1e3)
            if setter is not None:
                setter(previous)
    return {name: (min(v), statistics.median(v)) for name, v in per_round.items()}


def check_same_pixels(files, windows):
    """Whether custom_op equals Pillow on every window."""
    exact = True
    for data, window in zip(files, windows):
        ours = custom_op_crop(data, *window).permute(1, 2, 0).numpy()
        exact &= bool(np.array_equal(ours, pillow_crop(data, *window)))
    return exact


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imagenet", default=str(ROOT.parent / "shared" / "data" / "imagenet-sample"))
    parser.add_argument("--n-medium", type=int, default=100, help="number of 533x800 files (0: skip the case)")
    parser.add_argument("--n-large", type=int, default=8, help="number of 4000x3000 files (0: skip the case)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the report to this .md file, and its data to the .json beside it")
    args = parser.parse_args()

    torch.set_num_threads(1)
    fns = methods()
    ours = "custom_op.decode_and_crop_jpeg"
    report = Report(
        "CPU decode-and-crop benchmark, single thread",
        machine=cpu_description(),
        details={
            "versions": f"Python {platform.python_version()}, torch {torch.__version__}, Pillow {Image.__version__}, "
            f"custom_op linked against libjpeg-turbo {custom_op.library_info().get('libjpeg_turbo_version', '?')}",
            "each figure": f"best of {args.rounds} rounds (median in parentheses), ms per image",
        },
    )
    for title, files, size in cases(args):
        windows = random_windows(files, size, args.seed)
        exact = check_same_pixels(files, windows)
        result = measure(files, windows, fns, args.rounds)
        report.heading(title)
        report.text(f"custom_op output equals Pillow's on every window: {exact}")
        report.table(
            ["method", "ms/image", "time / custom_op time"],
            [
                [name, f"{best:.3f} ({median:.3f})", f"{best / result[ours][0]:.2f}x"]
                for name, (best, median) in result.items()
            ],
        )
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
