"""What check_entropy=True costs: the CPU-side check of every file before nvJPEG gets it (libjpeg reads
the headers, our Huffman decoder walks the whole scan), alone and inside GPU batches.

    python bench/bench_gpu_check.py --out bench/results/gpu_check_h100.md     # on a GPU machine
    python bench/bench_gpu_check.py --only walk                              # the check alone, any machine

Sections (both by default; --only picks one):
  walk  the check alone on the ImageNet sample (custom_op.testing.check_entropy_data over all the
        files in one call), on one thread and on torch's intra-op pool: ms per image, wall and
        process CPU time. Runs without a GPU.
  gpu   custom_op.decode_and_crop_jpegs(..., device="cuda") on the sample's 224x224 windows (images
        smaller than 224 give smaller windows), batches of 64 and 256, without and with the check:
        images/s and host CPU ms per image (the process's CPU time, all threads, over the images
        decoded). The same again on batches where --damaged of the files are damaged copies
        (bits flipped in the entropy-coded data, on_error="return"): the check sends those it finds
        to the CPU path. Under each table, how many items' outcome (exception or pixels) differed
        from the CPU path's. Methods alternate round by round; the best round is reported, the
        median beside it.

The report belongs on the benchmarks page: docs/benchmarks.md names each file of bench/results/ in a
{bench-results} block.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import common  # noqa: E402
from bench_gpu import Method, as_tensor, make_batches, measure  # noqa: E402

import custom_op  # noqa: E402
from custom_op import gpu, testing  # noqa: E402

SECTIONS = ("walk", "gpu")


def load_sample(folder):
    files = [p.read_bytes() for p in sorted(Path(folder).iterdir())]
    if not files:
        sys.exit(f"no files in {folder}")
    return files, common.random_windows(files, 224, seed=0)


def flipped(data: bytes, rng: np.random.Generator) -> bytes:
    """A copy with one to three bits flipped in the entropy-coded data (the end marker kept)."""
    import damaged_jpegs

    start = damaged_jpegs.entropy_start(data)
    copy = bytearray(data)
    for position in rng.integers(start, len(data) - 2, size=int(rng.integers(1, 4))):
        copy[position] ^= 1 << int(rng.integers(0, 8))
    return bytes(copy)


# ---------------------------------------------------------------------------------------------------
# The check alone


def time_walk(tensors, threads, rounds):
    """(best wall ms/image, process CPU ms/image of that round) of the check over every file at once."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.ops.custom_op._check_entropy_data(tensors)  # warm-up: the per-thread table caches
        best = None
        for _ in range(rounds):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            torch.ops.custom_op._check_entropy_data(tensors)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            if best is None or wall < best[0]:
                best = (wall, cpu)
    finally:
        torch.set_num_threads(before)
    n = len(tensors)
    return best[0] / n * 1e3, best[1] / n * 1e3


def walk_section(args):
    files, _ = load_sample(args.imagenet)
    tensors = [as_tensor(f) for f in files]
    found = testing.check_entropy_data(files)
    counts = ", ".join(f"{name} {found.count(name)}" for name in sorted(set(found)))
    mean_kb = sum(map(len, files)) / len(files) / 1e3
    lines = [
        f"## The check alone: {len(files)} ImageNet photos (mean {mean_kb:.0f} kB), all in one call",
        "",
        f"What it found: {counts}.",
        "",
        "| threads | wall ms/image | process CPU ms/image |",
        "| ---: | ---: | ---: |",
    ]
    for threads in sorted({1, args.threads}):
        wall, cpu = time_walk(tensors, threads, args.walk_rounds)
        lines.append(f"| {threads} | {wall:.3f} | {cpu:.3f} |")
    return common.emit(lines + ["", f"(best of {args.walk_rounds} rounds)", ""])


# ---------------------------------------------------------------------------------------------------
# In GPU batches


def ours(check_entropy, on_error="raise"):
    def run(tensors, windows):
        return custom_op.decode_and_crop_jpegs(
            tensors, *zip(*windows), device="cuda", check_entropy=check_entropy, on_error=on_error
        )

    return Method(run, "original")


def outcome_differences(files, windows, method, batch):
    """Items whose outcome (exception type and message, or pixels) differs from the CPU path's."""
    differ = 0
    for k in range(0, len(files), batch):
        chunk, wins = files[k : k + batch], windows[k : k + batch]
        got = method.run([as_tensor(f) for f in chunk], wins)
        expected = custom_op.decode_and_crop_jpegs(chunk, *zip(*wins), on_error="return")
        for out, ref in zip(got, expected):
            if isinstance(ref, torch.Tensor):
                differ += not (isinstance(out, torch.Tensor) and torch.equal(out.cpu(), ref))
            else:
                differ += not (type(out) is type(ref) and str(out) == str(ref))
    return differ


def gpu_table(title, files, windows, methods, args, extra):
    tensors = [as_tensor(f) for f in files]
    lines = [f"### {title}", ""] + ([extra, ""] if extra else [])
    lines += [
        "| method | batch | images/s (best) | images/s (median) | host CPU ms/image | vs without the check "
        "| items whose outcome differs from the CPU path's |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for batch in args.batches:
        batches = make_batches(tensors, None, windows, batch, max(1, args.images_per_round // batch))
        summary = measure(methods, batches, args.rounds)
        base = next(iter(summary.values()))[0]
        for name, (best, median, cpu_ms) in summary.items():
            differ = outcome_differences(files, windows, methods[name], batch)
            lines.append(
                f"| {name} | {batch} | {best:,.0f} | {median:,.0f} | {cpu_ms:.3f} | {best / base:.2f}x | "
                f"{differ} of {len(files)} |"
            )
    return common.emit(lines + [""])


def gpu_section(args):
    files, windows = load_sample(args.imagenet)
    found = testing.check_entropy_data(files)
    clean = {"without the check": ours(False), "check_entropy=True": ours(True)}
    lines = common.emit(
        [
            f"## In GPU batches: {len(files)} ImageNet photos, one 224x224 window each",
            "",
            f"- what the check finds in the sample: {', '.join(f'{n} {found.count(n)}' for n in sorted(set(found)))}",
            "",
        ]
    )
    lines += gpu_table("The sample as it is", files, windows, clean, args, "")
    rng = np.random.default_rng(1)
    damaged = [flipped(f, rng) if rng.random() < args.damaged else f for f in files]
    hostile = {
        "without the check, on_error='return'": ours(False, "return"),
        "check_entropy=True, on_error='return'": ours(True, "return"),
    }
    n_damaged = sum(d != f for d, f in zip(damaged, files))
    checked = testing.check_entropy_data(damaged)
    extra = (
        f"{n_damaged} of the {len(files)} files with one to three bits flipped in their entropy-coded data "
        f"(the rest as they are); the check finds "
        f"{', '.join(f'{n} {checked.count(n)}' for n in sorted(set(checked)))}. A flipped bit in a "
        "coefficient's extra bits leaves a valid scan, which the CPU path too decodes without a word."
    )
    return lines + gpu_table("With damaged files", damaged, windows, hostile, args, extra)


# ---------------------------------------------------------------------------------------------------


def header(args, with_gpu) -> common.Report:
    """The report, its header filled in: the sections' Markdown is added to it as they finish."""
    details = {
        "versions": common.versions(common.nvjpeg_description()) if with_gpu else common.versions(),
        "GPU figures": f"best of {args.rounds} rounds (median beside it); host CPU = process CPU time (all threads) "
        f"per image; torch's intra-op threads: {args.threads}",
    }
    machine = common.gpu_description() if with_gpu else common.cpu_description()
    return common.Report("The cost of check_entropy", machine=machine, commit=args.commit, details=details, echo=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_imagenet_option(parser)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--images-per-round", type=int, default=2560)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--walk-rounds", type=int, default=7)
    parser.add_argument(
        "--threads", type=int, default=torch.get_num_threads(), help="torch's intra-op threads (the check runs there)"
    )
    parser.add_argument("--damaged", type=float, default=0.1, help="gpu section: the fraction of files damaged")
    parser.add_argument(
        "--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), metavar="SECTION", help="walk, gpu"
    )
    common.add_report_options(parser)
    args = parser.parse_args(argv)

    with_gpu = "gpu" in args.only
    if with_gpu and not gpu.cuda_available():
        sys.exit(f"no GPU backend here ({gpu.unavailable_reason()}); --only walk runs the check alone")
    torch.set_num_threads(args.threads)
    common.run_sections(header(args, with_gpu), {"walk": walk_section, "gpu": gpu_section}, args)


if __name__ == "__main__":
    main()
