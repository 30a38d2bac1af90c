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
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import common  # noqa: E402

import custom_op  # noqa: E402


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


# The window size for each size of generated files (height, width); 224 for the ImageNet photos.
WINDOWS = {(533, 800): 256, (3000, 4000): 512}

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
    for title, files, size in common.photo_cases(args):
        window = WINDOWS.get(size, 224)
        yield f"{title}, {window}x{window}", files, window


def one_pass(fn, files, windows):
    """A pass of `fn` over every file, with its knob (KNOBS) set for the pass."""

    def run():
        setter, value = KNOBS.get(fn, (None, None))
        previous = setter(value) if setter is not None else None
        try:
            for data, window in zip(files, windows):
                fn(data, *window)
        finally:
            if setter is not None:
                setter(previous)

    return run


def measure(files, windows, fns, rounds):
    return common.time_in_rounds({name: one_pass(fn, files, windows) for name, fn in fns.items()}, rounds, len(files))


def check_same_pixels(files, windows):
    """Whether custom_op equals Pillow on every window."""
    exact = True
    for data, window in zip(files, windows):
        ours = custom_op_crop(data, *window).permute(1, 2, 0).numpy()
        exact &= bool(np.array_equal(ours, pillow_crop(data, *window)))
    return exact


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_case_options(parser, medium=(100, 533, 800), large=(8, 3000, 4000), rounds=7)
    common.add_report_options(parser, commit=False)
    args = parser.parse_args()

    torch.set_num_threads(1)
    fns = methods()
    ours = "custom_op.decode_and_crop_jpeg"
    report = common.Report(
        "CPU decode-and-crop benchmark, single thread",
        machine=common.cpu_description(),
        details={
            "versions": common.versions(f"Pillow {Image.__version__}"),
            "each figure": f"best of {args.rounds} rounds (median in parentheses), ms per image",
        },
    )
    for title, files, size in cases(args):
        windows = common.random_windows(files, size, args.seed)
        exact = check_same_pixels(files, windows)
        result = measure(files, windows, fns, args.rounds)
        report.heading(title)
        report.text(f"custom_op output equals Pillow's on every window: {exact}")
        report.table(
            ["method", "ms/image", "time / custom_op time"],
            common.method_rows(result, result[ours][0], speed_up=False),
        )
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
