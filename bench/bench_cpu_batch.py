"""The batched CPU decode on torch's intra-op thread pool: one thread against several, same files and
windows, in one run.

    python bench/bench_cpu_batch.py                       # prints the report (Markdown)
    python bench/bench_cpu_batch.py --out bench/results/cpu_batch.md      # also writes it, and cpu_batch.json

custom_op.decode_and_crop_jpegs decodes the items of a batch in parallel on torch's intra-op pool, in
the calling process, the GIL released. Cases: batches of 64 ImageNet photos (../shared/data/imagenet-
sample, when present; windows of photos smaller than 224 are clipped to them) and of generated 800x533
photos, 224x224 windows. Methods: the batched call
with torch.set_num_threads(1), with 2 and with every core; a Python loop of single-image calls.
Methods alternate round by round so that a slow moment of the machine hits all of them alike; the
best round of each is reported (median in parentheses), with each one's speed against one thread.
Outputs are compared with the loop's: they must be identical.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import common  # noqa: E402

import custom_op  # noqa: E402

BATCH = 64


def batched(threads):
    def run(files, windows):
        torch.set_num_threads(threads)
        return custom_op.decode_and_crop_jpegs(files, *zip(*windows))

    return run


def loop(files, windows):
    torch.set_num_threads(1)
    return [custom_op.decode_and_crop_jpeg(d, *w) for d, w in zip(files, windows)]


def cases(args):
    files = common.imagenet_files(args.imagenet)
    if files is not None:
        yield f"ImageNet sample, batches of {BATCH}", files
    yield f"generated 800x533, batches of {BATCH}", common.generated_files(2 * BATCH, 533, 800, seed=args.seed)


def measure(files, windows, methods, rounds):
    batches = [(files[k : k + BATCH], windows[k : k + BATCH]) for k in range(0, len(files) - BATCH + 1, BATCH)]

    def one_pass(fn):
        def run():
            for f, w in batches:
                fn(f, w)

        return run

    passes = {name: one_pass(fn) for name, fn in methods.items()}
    return common.time_in_rounds(passes, rounds, len(batches) * BATCH)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_imagenet_option(parser)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    common.add_report_options(parser, commit=False)
    args = parser.parse_args()

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    methods = {"decode_and_crop_jpegs, 1 thread": batched(1), "decode_and_crop_jpegs, 2 threads": batched(2)}
    if cores > 2:
        methods[f"decode_and_crop_jpegs, {cores} threads"] = batched(cores)
    methods["loop of decode_and_crop_jpeg, 1 thread"] = loop
    base = "decode_and_crop_jpegs, 1 thread"
    before = torch.get_num_threads()
    report = common.Report(
        "Batched CPU decode on the intra-op thread pool",
        machine=common.cpu_description(),
        details={
            "versions": common.versions(),
            "each figure": f"best of {args.rounds} rounds (median in parentheses), ms per image; speed-up: one "
            "thread's time / this method's",
        },
    )
    try:
        for title, files in cases(args):
            files = files[: len(files) // BATCH * BATCH]
            windows = common.random_windows(files, 224, args.seed)
            reference = [loop(files[k : k + BATCH], windows[k : k + BATCH]) for k in range(0, len(files), BATCH)]
            identical = all(
                all(map(torch.equal, fn(files[k : k + BATCH], windows[k : k + BATCH]), reference[k // BATCH]))
                for fn in methods.values()
                for k in range(0, len(files), BATCH)
            )
            result = measure(files, windows, methods, args.rounds)
            report.heading(f"{title} ({len(files)} files), 224x224 windows")
            report.text(f"outputs identical to the loop of single calls: {identical}")
            report.table(
                ["method", "ms/image", "speed-up"],
                common.method_rows(result, result[base][0]),
            )
    finally:
        torch.set_num_threads(before)
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
