"""Single-thread benchmark of random-access decoding: the same windows, decoded three ways.

    python bench/bench_random_access.py                      # all cases, prints the report (Markdown)
    python bench/bench_random_access.py --out bench/results/random_access.md   # also writes random_access.json

Methods, on the same files and the same windows:
  - Pillow full decode + slice, on the original files (what a torchvision pipeline does);
  - custom_op.decode_and_crop_jpeg on the original files (crop + skip + stop early);
  - custom_op.decode_and_crop_jpeg on copies rewritten by custom_op.prepare_jpeg (restart segments),
    and the same with libjpeg-turbo's own Huffman decoder instead of ours (what it costs without it).
Cases: ../shared/data/imagenet-sample (when present); the same photos re-encoded by Pillow in 4:2:0 at
quality 90 and at 0.7 of their size (--reencoded): most of the sample is 4:4:4, most ImageNet photos
are 4:2:0, and a window takes a larger share of a smaller photo, which bounds the speed-up; and
generated 800x533 and 4000x3000 sets (datasets.synthetic), each at 224x224 and 128x128 windows.
Every window is first checked: both custom_op results must equal Pillow's on the original, pixel for
pixel. The report gives the size change of the
prepared copies and the length of their restart segments (bench_segments.py gives more), how many
windows took the restart-segment path, and the time of the prepare pass.
The methods take turns file by file, so that a slow moment of the (shared) machine hits all of them
alike. Each round gives every method's time per image and its ratio to Pillow's in that round; the
report gives the medians over the rounds, the best time, and the lowest and highest round's ratio (a
speed-up that holds in every round holds in the lowest).
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import common  # noqa: E402

import custom_op  # noqa: E402
from custom_op.testing import random_access_decodes  # noqa: E402


def pillow_crop(data, top, left, height, width):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[top : top + height, left : left + width]


def custom_op_crop(data, top, left, height, width):
    return custom_op.decode_and_crop_jpeg(data, top, left, height, width)


def custom_op_crop_libjpeg_huffman(data, top, left, height, width):
    """The same with libjpeg-turbo's own Huffman decoder in place of ours (csrc/cpu/entropy_decoder.h):
    libjpeg-turbo 2.1 decodes every scan that declares restart markers on its slow path."""
    previous = torch.ops.custom_op._set_own_entropy_decoder(False)
    try:
        return custom_op.decode_and_crop_jpeg(data, top, left, height, width)
    finally:
        torch.ops.custom_op._set_own_entropy_decoder(previous)


def prepare_all(files, args):
    start = time.perf_counter()
    prepared = [
        custom_op.prepare_jpeg(data, max_growth=args.max_growth, max_segment_bytes=args.max_segment_bytes or None)
        for data in files
    ]
    return prepared, time.perf_counter() - start


def check_exact(originals, prepared, windows):
    """(windows where both custom_op results equal Pillow's, windows that took the segment path)."""
    exact, before = 0, random_access_decodes()
    for original, ready, window in zip(originals, prepared, windows):
        reference = pillow_crop(original, *window)
        on_original = custom_op_crop(original, *window).permute(1, 2, 0).numpy()
        on_prepared = custom_op_crop(ready, *window).permute(1, 2, 0).numpy()
        exact += bool(np.array_equal(on_original, reference) and np.array_equal(on_prepared, reference))
    return exact, random_access_decodes() - before


def measure(runs, rounds):
    """runs: {name: (fn, files, windows)} -> {name: [ms/image of each round]}.

    The methods take turns file by file, so that a busy moment of this shared machine slows all of
    them alike; each round's total per method is one sample. The order is shuffled for every file
    (seeded): a method that runs right after another on the same file finds its bytes in the caches,
    and a fixed cyclic order would give that advantage to the same method every time.
    """
    names = list(runs)
    count = len(next(iter(runs.values()))[1])
    per_round = {name: [] for name in names}
    clock = time.perf_counter
    order = random.Random(0)
    for _ in range(rounds):
        totals = dict.fromkeys(names, 0.0)
        for i in range(count):
            for name in order.sample(names, len(names)):
                fn, files, windows = runs[name]
                start = clock()
                fn(files[i], *windows[i])
                totals[name] += clock() - start
        for name in names:
            per_round[name].append(totals[name] / count * 1e3)
    return per_round


def round_rows(per_round: dict, base: str) -> list[list[str]]:
    """Per method: median ms/image (best), and the speed-up over `base`: the median of the rounds'
    ratios, with the lowest and the highest."""
    rows = []
    for name, times in per_round.items():
        rows.append(
            [
                name,
                f"{statistics.median(times):.3f} ({min(times):.3f})",
                common.round_ratios(per_round[base], times),
            ]
        )
    return rows


def reencoded(files: list[bytes], scale: float) -> list[bytes]:
    """The RGB photos of `files` decoded, resized by `scale` (bilinear, at least 224 pixels a side) and
    encoded by Pillow in 4:2:0 at quality 90."""
    out = []
    for data in files:
        image = Image.open(io.BytesIO(data))
        if image.mode != "RGB":
            continue
        if scale != 1:
            size = tuple(max(224, round(n * scale)) for n in image.size)
            image = image.resize(size, Image.BILINEAR)
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=90, subsampling=2)
        out.append(buf.getvalue())
    return out


def with_reencoded(cases, reencode: bool):
    """The cases, with the ImageNet sample's re-encoded copies after it (where `reencode`)."""
    for title, files, size in cases:
        yield title, files, size
        if reencode and size is None:
            for scale in (1, 0.7):
                copies = reencoded(files, scale)
                where = "" if scale == 1 else f", at {scale} of their size"
                yield f"the sample's {len(copies)} RGB photos re-encoded in 4:2:0 at quality 90{where}", copies, None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_case_options(parser, medium=(100, 533, 800), large=(8, 3000, 4000), rounds=15)
    parser.add_argument("--sizes", default="224,128", help="window sizes, comma-separated")
    parser.add_argument(
        "--max-growth", type=float, default=custom_op.prepare.DEFAULT_MAX_GROWTH, help="prepare_jpeg's size budget"
    )
    parser.add_argument(
        "--max-segment-bytes",
        type=int,
        default=custom_op.prepare.DEFAULT_MAX_SEGMENT_BYTES,
        help="prepare_jpeg's bound on segment lengths (0: no bound)",
    )
    parser.add_argument(
        "--reencoded",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the ImageNet sample re-encoded in 4:2:0 at quality 90, at full size and at 0.7 of it",
    )
    parser.add_argument("--note", default="", help="a line about the machine's state, added to the report")
    common.add_report_options(parser, commit=False)
    args = parser.parse_args()

    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    report = common.Report(
        "Random-access decoding benchmark, single thread",
        machine=common.cpu_description(args.note),
        details={
            "versions": common.versions(f"Pillow {Image.__version__}"),
            "prepared with": f"`custom_op.prepare_jpeg(data, max_growth={args.max_growth}, "
            f"max_segment_bytes={args.max_segment_bytes or None})` (restart interval chosen per file)",
            "each figure": f"{args.rounds} interleaved rounds: the median ms per image (the best in parentheses), "
            "and the median of the rounds' speed-ups over Pillow (the lowest and highest round in parentheses); "
            f"the same random windows (seed {args.seed}) for every method",
        },
    )
    for title, originals, _ in with_reencoded(common.photo_cases(args), args.reencoded):
        prepared, prepare_s = prepare_all(originals, args)
        before, after = sum(map(len, originals)), sum(map(len, prepared))
        lengths = [n for data in prepared for n in common.scan_facts(data)[2]]
        report.heading(title)
        report.text(
            f"prepared copies: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB "
            f"({100 * (after / before - 1):+.2f}%), largest single-file change "
            f"{100 * max(len(p) / len(o) - 1 for o, p in zip(originals, prepared)):+.2f}%; restart segments "
            f"{statistics.median(lengths):.0f} bytes (median), {max(lengths)} at most; "
            f"prepare pass {1e3 * prepare_s / len(originals):.1f} ms/file (one process)"
        )
        for size in sizes:
            windows = common.random_windows(originals, size, args.seed)
            exact, fast = check_exact(originals, prepared, windows)
            result = measure(
                {
                    "Pillow full + slice (originals)": (pillow_crop, originals, windows),
                    "custom_op.decode_and_crop_jpeg (originals)": (custom_op_crop, originals, windows),
                    "custom_op.decode_and_crop_jpeg (prepared)": (custom_op_crop, prepared, windows),
                    "custom_op (prepared), libjpeg's Huffman decoder": (
                        custom_op_crop_libjpeg_huffman,
                        prepared,
                        windows,
                    ),
                },
                args.rounds,
            )
            report.heading(f"{size}x{size} windows", level=3)
            report.text(
                f"equal to Pillow's pixels: {exact} of {len(windows)} windows; restart-segment path "
                f"taken on {fast} of {len(windows)} prepared files"
            )
            report.table(
                ["method", "ms/image", "speed-up over Pillow"],
                round_rows(result, "Pillow full + slice (originals)"),
            )
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
