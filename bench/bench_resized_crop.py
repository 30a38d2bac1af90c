"""Single-thread CPU benchmark of RandomResizedCrop-style decoding to 224x224, every method on the same windows.

    python bench/bench_resized_crop.py                       # prints the report (Markdown)
    python bench/bench_resized_crop.py --out bench/results/resized_crop.md     # also writes resized_crop.json

Training (one RandomResizedCrop window per file, drawn once with torchvision's algorithm, seed --seed):
- Pillow full decode + crop + resize: what torchvision's RandomResizedCrop does to a PIL image
  (``img.crop(window).resize((224, 224), BILINEAR)``), then a CHW uint8 tensor (as PILToTensor).
- Pillow draft() + resize(box=...): Pillow's own DCT scaling (1/2, 1/4, 1/8) where the window stays
  >= 224 after it, then ``resize(box=scaled window)``; the plain Pillow path where no scale applies.
- custom_op.decode_and_crop_jpeg + resize_box: the window at full resolution, then our resampler.
- custom_op.decode_and_crop_jpeg + F.interpolate: the same with torch's uint8 antialiased bilinear.
- fused decode_and_resized_crop_jpeg, with the scale picked from {1, 2, 4, 8} (the default) and from
  all of 1..8 (the alternative that was benchmarked to choose the default); and the default with
  libjpeg-turbo's own Huffman decoder instead of ours (csrc/cpu/entropy_decoder.h).
Evaluation (Resize(256) + CenterCrop(224)): Pillow full decode, Pillow draft(), and ResizeCenterCropJpeg.

Methods alternate within each round so that a slow moment of the machine hits all of them alike; the
best round and the median are reported, with ratios against Pillow full decode. PSNR columns compare
each method's pixels with the Pillow reference (inf: identical).
"""

from __future__ import annotations

import argparse
import collections
import io
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import common  # noqa: E402

import custom_op  # noqa: E402
from custom_op.resized_crop import INTERPOLATIONS, choose_scale  # noqa: E402

SIZE = 224
ALL_SCALES = tuple(range(1, 9))


def to_chw(image: Image.Image) -> torch.Tensor:
    # As torchvision's PILToTensor: a copy of the pixels, viewed as CHW.
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


# ------------------------------------------------------------------------------------------ training


def pillow_full(data, window):
    top, left, h, w = window
    image = Image.open(io.BytesIO(data)).convert("RGB")
    return to_chw(image.crop((left, top, left + w, top + h)).resize((SIZE, SIZE), Image.BILINEAR))


def draft_factor(height, width):
    """The largest Pillow draft factor (1, 2, 4, 8) that keeps a height x width window >= SIZE."""
    return max(k for k in (1, 2, 4, 8) if k == 1 or (height >= SIZE * k and width >= SIZE * k))


def pillow_draft(data, window):
    top, left, h, w = window
    k = draft_factor(h, w)
    if k == 1:
        return pillow_full(data, window)
    image = Image.open(io.BytesIO(data))
    image.draft("RGB", (image.width // k, image.height // k))
    image = image.convert("RGB")
    box = (left / k, top / k, (left + w) / k, (top + h) / k)
    return to_chw(image.resize((SIZE, SIZE), Image.BILINEAR, box=box))


def crop_then_resize_box(data, window):
    crop = custom_op.decode_and_crop_jpeg(data, *window)
    _, h, w = crop.shape
    return torch.ops.custom_op.resize_box(
        crop,
        box=[0.0, 0.0, float(h), float(w)],
        size=[SIZE, SIZE],
        out_window=[0, 0, SIZE, SIZE],
        origin=[0, 0],
        filter=INTERPOLATIONS["bilinear"],
        antialias=True,
    )


def crop_then_interpolate(data, window):
    crop = custom_op.decode_and_crop_jpeg(data, *window)
    out = F.interpolate(crop[None], size=(SIZE, SIZE), mode="bilinear", antialias=True, align_corners=False)
    return out[0]


def fused(data, window):
    return custom_op.decode_and_resized_crop_jpeg(data, *window, SIZE)


def fused_libjpeg_huffman(data, window):
    previous = torch.ops.custom_op._set_own_entropy_decoder(False)
    try:
        return fused(data, window)
    finally:
        torch.ops.custom_op._set_own_entropy_decoder(previous)


def fused_all_scales(data, window):
    return custom_op.decode_and_resized_crop_jpeg(
        data, *window, SIZE, scale=choose_scale(window[2], window[3], SIZE, ALL_SCALES)
    )


TRAIN = {
    "Pillow full decode + crop + resize": pillow_full,
    "Pillow draft() + resize(box)": pillow_draft,
    "custom_op crop + resize_box": crop_then_resize_box,
    "custom_op crop + F.interpolate(antialias)": crop_then_interpolate,
    "fused, scales {1,2,4,8} (default)": fused,
    "fused, libjpeg's Huffman decoder": fused_libjpeg_huffman,
    "fused, scales 1..8": fused_all_scales,
}

# ---------------------------------------------------------------------------------------- evaluation

EVAL_TRANSFORM = custom_op.ResizeCenterCropJpeg(256, SIZE)


def centre_crop(image: Image.Image, rw, rh, box=None):
    resized = image.resize((rw, rh), Image.BILINEAR, box=box)
    top, left = int(round((rh - SIZE) / 2.0)), int(round((rw - SIZE) / 2.0))
    return to_chw(resized.crop((left, top, left + SIZE, top + SIZE)))


def eval_pillow_full(data, _window):
    image = Image.open(io.BytesIO(data)).convert("RGB")
    rh, rw = EVAL_TRANSFORM.resized_size(image.height, image.width)
    return centre_crop(image, rw, rh)


def eval_pillow_draft(data, _window):
    image = Image.open(io.BytesIO(data))
    rh, rw = EVAL_TRANSFORM.resized_size(image.height, image.width)
    full_w, full_h = image.size
    k = max(s for s in (1, 2, 4, 8) if s == 1 or (full_h >= rh * s and full_w >= rw * s))
    if k > 1:
        image.draft("RGB", (full_w // k, full_h // k))
    image = image.convert("RGB")
    return centre_crop(image, rw, rh, box=(0, 0, full_w / k, full_h / k))


def eval_fused(data, _window):
    return EVAL_TRANSFORM(data)


EVAL = {
    "Pillow full decode + Resize(256) + CenterCrop": eval_pillow_full,
    "Pillow draft() + Resize(256) + CenterCrop": eval_pillow_draft,
    "fused ResizeCenterCropJpeg": eval_fused,
}

# ---------------------------------------------------------------------------------------- scale set


def scale_table(rounds):
    """Fused time for square windows of side L at every DCT scale that keeps them >= 224: the data
    behind AUTO_SCALES. One generated 1600x1200 4:2:0 file; window at (100, 100). (columns, rows)."""
    data = common.generated_files(1, 1200, 1600, seed=2)[0]
    rows = []
    for side in (240, 300, 360, 420, 500, 700, 1000):
        cells = []
        for s in ALL_SCALES:
            if side * s < 8 * SIZE:
                cells.append("-")
                continue
            best = math.inf
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(5):
                    custom_op.decode_and_resized_crop_jpeg(data, 100, 100, side, side, SIZE, scale=s)
                best = min(best, (time.perf_counter() - start) / 5 * 1e3)
            cells.append(f"{best:.2f}")
        rows.append([str(side)] + cells)
    return ["window side"] + [f"s={s}" for s in ALL_SCALES], rows


# ---------------------------------------------------------------------------------------------- run


def cases(args):
    return common.photo_cases(
        args,
        imagenet="ImageNet sample ({count} photos, about 500x375)",
        generated="generated photo-like {width}x{height} ({count} files, 4:2:0, q90)",
    )


def windows_for(files, seed):
    transform = custom_op.RandomResizedCropJpeg(SIZE)
    generator = torch.Generator().manual_seed(seed)
    out = []
    for data in files:
        info = custom_op.read_jpeg_header(data)
        out.append(transform.get_params(info.height, info.width, generator))
    return out


def measure(files, windows, fns, rounds):
    def one_pass(fn):
        def run():
            for data, window in zip(files, windows):
                fn(data, window)

        return run

    return common.time_in_rounds({name: one_pass(fn) for name, fn in fns.items()}, rounds, len(files))


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = torch.mean((a.double() - b.double()) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def mean_psnr(files, windows, fn, reference):
    values = [psnr(fn(d, w), reference(d, w)) for d, w in zip(files, windows)]
    finite = [v for v in values if math.isfinite(v)]
    exact = len(values) - len(finite)
    if not finite:
        return "inf (all identical)"
    return f"{statistics.mean(finite):.1f} (min {min(finite):.1f}; {exact}/{len(values)} identical)"


def table_rows(result, baseline, psnrs):
    return [row + [psnrs[row[0]]] for row in common.method_rows(result, result[baseline][0])]


TABLE_COLUMNS = ["method", "ms/image, best (median)", "Pillow full / method", "PSNR vs Pillow full, dB"]


def machine(label):
    return f"{label} ({common.cpu_description()})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_case_options(parser, medium=(24, 1200, 1600), large=(6, 3000, 4000), rounds=7)
    parser.add_argument("--machine", default="2-core CPU VM", help="how to name the machine in the report")
    parser.add_argument("--note", default="", help="a line added under the header (e.g. that the machine was shared)")
    common.add_report_options(parser, commit=False)
    args = parser.parse_args()

    torch.set_num_threads(1)
    details = {
        "versions": common.versions(f"Pillow {Image.__version__}"),
        "each figure": f"best of {args.rounds} rounds (median in parentheses), ms per image, torch threads = 1",
    }
    if args.note:
        details["note"] = args.note
    report = common.Report(
        "RandomResizedCrop decoding to 224x224, single thread", machine=machine(args.machine), details=details
    )
    for title, files, _ in cases(args):
        windows = windows_for(files, args.seed)
        scales = collections.Counter(choose_scale(w[2], w[3], SIZE) for w in windows)
        scales_all = collections.Counter(choose_scale(w[2], w[3], SIZE, ALL_SCALES) for w in windows)
        train = measure(files, windows, TRAIN, args.rounds)
        train_psnr = {name: mean_psnr(files, windows, fn, pillow_full) for name, fn in TRAIN.items()}
        evaluation = measure(files, windows, EVAL, args.rounds)
        eval_psnr = {name: mean_psnr(files, windows, fn, eval_pillow_full) for name, fn in EVAL.items()}
        report.heading(title)
        report.text(
            f"Scales chosen (eighths: windows), default set: {dict(sorted(scales.items()))}; "
            f"from 1..8: {dict(sorted(scales_all.items()))}"
        )
        report.text("Training: RandomResizedCrop window -> 224x224 bilinear")
        report.table(TABLE_COLUMNS, table_rows(train, "Pillow full decode + crop + resize", train_psnr), "lrrl")
        report.text("Evaluation: Resize(256) + CenterCrop(224), bilinear")
        report.table(
            TABLE_COLUMNS, table_rows(evaluation, "Pillow full decode + Resize(256) + CenterCrop", eval_psnr), "lrrl"
        )
    report.heading("Scale set: fused ms per window at each DCT scale (generated 1600x1200, 4:2:0)")
    report.text("Only scales that keep the window >= 224 are timed; the default picks the smallest of {1, 2, 4, 8}.")
    columns, rows = scale_table(args.rounds)
    report.table(columns, rows, "r" * len(columns))
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
