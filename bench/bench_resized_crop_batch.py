"""The batched fused resized crop on the CPU: one thread against two, same files, windows and flips.

    python bench/bench_resized_crop_batch.py          # prints the report (Markdown)
    python bench/bench_resized_crop_batch.py --out bench/results/resized_crop_batch.md   # also writes it, and .json

custom_op.decode_and_resized_crop_jpegs runs the items of a batch in parallel on torch's intra-op pool
(one item per task), the GIL released, into one [N, 3, 224, 224] tensor. Cases: batches of 32 ImageNet
photos (../shared/data/imagenet-sample, when present) and of generated 800x533 photos, with
RandomResizedCrop's windows (RandomResizedCropJpeg.get_params, scale (0.08, 1)) and random flips.
Methods: the batched call with torch.set_num_threads(1) and with 2, uint8 and float32 normalised
(ImageNet's mean and std); a Python loop of single-image calls (decode_and_resized_crop_jpeg, one
thread). Methods alternate round by round so that a slow moment of the machine hits all of them alike;
the best round of each is reported (median in parentheses), in ms per image, with 2 threads' speed-up
over 1 (the median of the rounds' ratios, the lowest and highest beside it).
Every method's outputs are compared with the loop's (flipped where the batch flips, and
normalised by torch for the float32 call): they must be identical.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import common  # noqa: E402

import custom_op  # noqa: E402

BATCH = 32
SIZE = 224
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def batched(threads, **options):
    def run(files, windows, flips):
        torch.set_num_threads(threads)
        return custom_op.decode_and_resized_crop_jpegs(files, *zip(*windows), SIZE, flips=flips, **options)

    return run


def loop(files, windows, flips):
    torch.set_num_threads(1)
    out = [custom_op.decode_and_resized_crop_jpeg(d, *w, SIZE) for d, w in zip(files, windows)]
    return torch.stack([image.flip(-1) if flip else image for image, flip in zip(out, flips)])


def normalised(images: torch.Tensor) -> torch.Tensor:
    return (images.float() / 255 - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]


def cases(args):
    files = common.imagenet_files(args.imagenet)
    if files is not None:
        yield f"ImageNet sample, batches of {BATCH}", files
    yield f"generated 800x533, batches of {BATCH}", common.generated_files(4 * BATCH, 533, 800, seed=args.seed)


def draws(files, seed):
    """RandomResizedCrop's window and a fair flip for each file, reproducible."""
    transform = custom_op.RandomResizedCropJpeg(SIZE)
    g = torch.Generator().manual_seed(seed)
    windows = [transform.get_params(*custom_op.read_jpeg_header(d)[:2], g) for d in files]
    flips = [bool(torch.rand(1, generator=g) < 0.5) for _ in files]
    return windows, flips


def _one_pass(fn, batches):
    return lambda: [fn(*b) for b in batches]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_imagenet_option(parser)
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the methods in turn")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the windows and flips")
    common.add_report_options(parser, commit=False)
    args = parser.parse_args()

    float_options = dict(dtype=torch.float32, mean=MEAN, std=STD)
    methods = {
        "decode_and_resized_crop_jpegs, 1 thread": batched(1),
        "decode_and_resized_crop_jpegs, 2 threads": batched(2),
        "decode_and_resized_crop_jpegs, float32 normalised, 1 thread": batched(1, **float_options),
        "decode_and_resized_crop_jpegs, float32 normalised, 2 threads": batched(2, **float_options),
        "loop of decode_and_resized_crop_jpeg, 1 thread": loop,
    }
    before = torch.get_num_threads()
    report = common.Report(
        "Batched fused resized crop on the intra-op thread pool",
        machine=common.cpu_description(),
        details={
            "versions": common.versions(),
            "each figure": f"best of {args.rounds} rounds (median in parentheses), ms per image; 2 threads "
            "against 1: the median over the rounds of one thread's time / two threads' in the same round (the "
            "lowest and highest round in parentheses)",
        },
    )
    try:
        for title, files in cases(args):
            files = files[: len(files) // BATCH * BATCH]
            windows, flips = draws(files, args.seed)
            batches = [
                (files[k : k + BATCH], windows[k : k + BATCH], flips[k : k + BATCH])
                for k in range(0, len(files), BATCH)
            ]
            reference = [loop(*b) for b in batches]
            identical = all(
                torch.equal(fn(*b), normalised(ref) if "float32" in name else ref)
                for name, fn in methods.items()
                for b, ref in zip(batches, reference)
            )

            passes = {name: _one_pass(fn, batches) for name, fn in methods.items()}
            per_round = {}
            result = common.time_in_rounds(passes, args.rounds, len(files), per_round)
            report.heading(f"{title} ({len(files)} files), {SIZE}x{SIZE} outputs")
            report.text(f"outputs identical to the loop of single calls: {identical}")
            rows = []
            for name, (best, median) in result.items():
                one = name.replace("2 threads", "1 thread")
                ratio = ""
                if "2 threads" in name:
                    ratio = common.round_ratios(per_round[one], per_round[name])
                rows.append([name, common.best_and_median(best, median), ratio])
            report.table(["method", "ms/image", "2 threads against 1"], rows)
    finally:
        torch.set_num_threads(before)
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
