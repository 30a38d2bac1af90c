"""What a DataLoader batch of encoded files costs the host on its way from the workers to the main
process: a list of the files as bytes objects or as tensors (as a plain collate returns them), against
the files in one tensor (custom_op.pack_files), the batch the GPU decode is then called with. No GPU
needed.

    python bench/bench_loader_transfer.py [--imagenet DIR] [--batches 64 256] [--workers 2] [--out FILE]

The dataset returns each photo of DIR (photo-like images this script generates where DIR does not
exist) with its window and label: as the bytes read from the file, or as a fresh uint8 tensor of them
(as a dataset that hands out tensors does); the main process takes each batch, and unpacks the packed
ones (the views the decode gets). Each figure: CPU time per batch of the main process (all its
threads) and of the workers (from /proc/<pid>/stat, Linux), and the wall time per batch, over --count
batches after two untimed; the ways take turns, --rounds times, and the median round is reported.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from common import Report, add_imagenet_option, add_report_options, cpu_description, photos_detail, spaced_photos  # noqa: E402
from torch.utils.data import DataLoader, Dataset, default_collate  # noqa: E402

import custom_op  # noqa: E402

WAYS = ("one bytes object per file", "one tensor per file", "custom_op.pack_files")
BASELINE = WAYS[1]


class Files(Dataset):
    def __init__(self, files: list[bytes], length: int, as_tensors: bool):
        self.files, self.length, self.as_tensors = files, length, as_tensors

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        data = self.files[i % len(self.files)]
        if self.as_tensors:
            data = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return data, torch.tensor([0, 0, 224, 224]), i % 1000


def collate_list(items):
    return [item[0] for item in items], *default_collate([item[1:] for item in items])


def collate_packed(items):
    return custom_op.pack_files([item[0] for item in items]), *default_collate([item[1:] for item in items])


def worker_cpu_seconds() -> float:
    """The CPU time so far of this process's live child processes (the DataLoader's workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def measure(files, batch: int, way: str, workers: int, count: int) -> tuple[float, float, float]:
    """(main CPU, workers' CPU, wall), seconds per batch, over `count` batches after two untimed."""
    collate = collate_packed if way == "custom_op.pack_files" else collate_list
    # More batches than are taken: the workers run ahead of the main process (prefetching) from the
    # first batch to the last, so that the timed stretch sees them in steady state, and still alive.
    length = batch * (count + 2 + 4 * workers)
    dataset = Files(files, length, as_tensors=way != "one bytes object per file")
    loader = DataLoader(dataset, batch_size=batch, num_workers=workers, collate_fn=collate)
    batches = iter(loader)
    for _ in range(2):
        next(batches)
    main0, workers0, wall0 = time.process_time(), worker_cpu_seconds(), time.perf_counter()
    for _ in range(count):
        data = next(batches)[0]
        if isinstance(data, custom_op.PackedFiles):
            data.unpack()
    main, busy, wall = time.process_time() - main0, worker_cpu_seconds() - workers0, time.perf_counter() - wall0
    del batches, data
    return main / count, busy / count, wall / count


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_imagenet_option(parser)
    parser.add_argument("--photos", type=int, default=200)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--count", type=int, default=30, help="timed batches per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--note", default="", help="a remark on the machine, for the report's machine line")
    add_report_options(parser)
    args = parser.parse_args()

    files = [data for _, data in spaced_photos(args.imagenet, args.photos)]
    report = Report(
        "Encoded files from DataLoader workers to the main process",
        machine=cpu_description(args.note),
        commit=args.commit,
        details={
            "files": f"{photos_detail(args.imagenet, len(files))}, {sum(map(len, files)) / 1e6:.1f} MB",
            "loader": f"torch.utils.data.DataLoader, {args.workers} workers, default sharing strategy "
            f"({torch.multiprocessing.get_sharing_strategy()}), no pinning; torch {torch.__version__}",
            "each figure": f"ms per batch over {args.count} batches; the median of {args.rounds} rounds, "
            "the ways in turn",
        },
    )
    rows = []
    for batch in args.batches:
        results = {way: [] for way in WAYS}
        for r in range(args.rounds):
            for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                results[way].append(measure(files, batch, way, args.workers, args.count))
        medians = {way: [statistics.median(x[k] for x in results[way]) for k in range(3)] for way in WAYS}
        base = medians[BASELINE]
        for way in WAYS:
            main_s, workers_s, wall_s = medians[way]
            # (The workers' CPU time comes in clock ticks: a short run may count none.)
            ratios = [f"{b / x:.2f}x" if x > 0 else "-" for x, b in zip((main_s, workers_s, wall_s), base)]
            ratio = "" if way == BASELINE else ", ".join(ratios)
            rows.append(
                [
                    batch,
                    way,
                    f"{main_s * 1e3:.2f}",
                    f"{main_s / batch * 1e6:.0f}",
                    f"{workers_s * 1e3:.2f}",
                    f"{wall_s * 1e3:.2f}",
                    ratio,
                ]
            )
    report.table(
        [
            "batch",
            "files as",
            "main process CPU, ms per batch",
            "per image, us",
            "workers' CPU, ms per batch",
            "wall, ms per batch",
            "one tensor per file's over this (main, workers, wall)",
        ],
        rows,
        align="rlrrrrr",
    )
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
