"""The restart segments of prepared files: their lengths and what the layout costs in bytes, for a folder.

    python bench/bench_segments.py                                  # the ImageNet sample, default layout
    python bench/bench_segments.py --out bench/results/segments.md   # also writes segments.json
    python bench/bench_segments.py ~/data/train --max-segment-bytes 1024
    python bench/bench_segments.py ~/data/train-ra --prepared       # files prepared already: measure only

Every JPEG under the folder (recognised by its content) goes through custom_op.prepare_jpeg with the
options given (the default layout unless told), or is measured as it is with --prepared. A segment's
length is the bytes of entropy-coded data between two markers (the SOS segment or a restart marker
and the next marker; stuffed zero bytes count), what a decoder that Huffman-decodes one segment per
GPU thread reads in its longest thread. The report gives the distribution of the lengths over all
segments (median, p90, p99, max) and of each file's longest one, the restart intervals used (how many
divide the MCUs per row, how many let segments run from one row into the next), the size of the
prepared files against the originals (in all and per file), and the files with the longest segments.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import IMAGENET, Report, add_report_options, cpu_description, scan_facts, versions  # noqa: E402

import custom_op  # noqa: E402
from custom_op.prepare import DEFAULT_MAX_GROWTH, DEFAULT_MAX_SEGMENT_BYTES  # noqa: E402


def jpegs(folder: Path):
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if data.startswith(b"\xff\xd8"):
            yield path, data


def percentile(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default=str(IMAGENET))
    parser.add_argument("--prepared", action="store_true", help="measure the files as they are")
    parser.add_argument("--restart-mcus", type=int, default=None, help="prepare_jpeg's restart_mcus")
    parser.add_argument("--max-growth", type=float, default=DEFAULT_MAX_GROWTH, help="prepare_jpeg's max_growth")
    parser.add_argument(
        "--max-segment-bytes",
        type=int,
        default=DEFAULT_MAX_SEGMENT_BYTES,
        help="prepare_jpeg's max_segment_bytes (0: no bound)",
    )
    parser.add_argument("--top", type=int, default=8, help="files listed with their longest segment")
    parser.add_argument("--note", default="", help="a line about the machine's state, added to the report")
    add_report_options(parser, commit=False)
    args = parser.parse_args()

    torch.set_num_threads(1)
    folder = Path(args.folder)
    if not folder.is_dir():
        sys.exit(f"{folder} is not a folder")
    options = {
        "restart_mcus": args.restart_mcus,
        "max_growth": args.max_growth,
        "max_segment_bytes": args.max_segment_bytes or None,
    }
    rows, skipped, seconds = [], [], 0.0
    for path, original in jpegs(folder):
        name = path.relative_to(folder).as_posix()
        try:
            if args.prepared:
                prepared = original
            else:
                start = time.perf_counter()
                prepared = custom_op.prepare_jpeg(original, **options)
                seconds += time.perf_counter() - start
            info = custom_op.read_jpeg_header(prepared)
            interval, per_row, lengths = scan_facts(prepared)
        except (RuntimeError, ValueError) as error:
            skipped.append(f"{name}: {str(error).splitlines()[0][:100]}")
            continue
        rows.append(
            {
                "name": name,
                "size": f"{info.width}x{info.height} {info.subsampling}",
                "before": len(original),
                "after": len(prepared),
                "interval": interval,
                "per_row": per_row,
                "random_access": info.random_access,
                "lengths": lengths,
            }
        )
    if not rows:
        sys.exit(f"no JPEG under {folder} could be measured")

    every = [n for r in rows for n in r["lengths"]]
    longest = [max(r["lengths"]) for r in rows]
    before, after = sum(r["before"] for r in rows), sum(r["after"] for r in rows)
    growth = [r["after"] / r["before"] - 1 for r in rows]
    dividing = sum(r["interval"] > 0 and r["per_row"] % r["interval"] == 0 for r in rows)
    crossing = sum(r["interval"] > 0 and r["per_row"] % r["interval"] != 0 for r in rows)
    what = (
        "measured as they are (--prepared)"
        if args.prepared
        else "prepared with `custom_op.prepare_jpeg(data, "
        + ", ".join(f"{k}={v!r}" for k, v in options.items())
        + ")`"
        + f", {1e3 * seconds / len(rows):.1f} ms per file (one thread)"
    )
    report = Report(
        "Restart segments of prepared files",
        machine=cpu_description(args.note),
        details={
            "versions": versions(),
            "files": f"{len(rows)} JPEGs under `{folder.name}/`, {what}"
            + (f"; {len(skipped)} left out (not preparable)" if skipped else ""),
            "segment length": "the bytes of entropy-coded data between two markers",
        },
        echo=False,
    )
    report.heading("Segment lengths (bytes)")
    report.table(
        ["over", "count", "median", "p90", "p99", "max"],
        [
            [
                "every segment",
                len(every),
                f"{statistics.median(every):.0f}",
                f"{percentile(every, 90):.0f}",
                f"{percentile(every, 99):.0f}",
                max(every),
            ],
            [
                "each file's longest",
                len(longest),
                f"{statistics.median(longest):.0f}",
                f"{percentile(longest, 90):.0f}",
                f"{percentile(longest, 99):.0f}",
                max(longest),
            ],
        ],
    )
    report.text(
        f"Restart intervals: {dividing} files with one dividing the MCUs per row, {crossing} with segments running "
        f"from one MCU row into the next, {len(rows) - dividing - crossing} without restart markers; "
        f"{sum(r['random_access'] for r in rows)} of {len(rows)} files random-access "
        "(`read_jpeg_header(data).random_access`). Segments per file: median "
        f"{statistics.median(len(r['lengths']) for r in rows):.0f}, fewest {min(len(r['lengths']) for r in rows)}."
    )
    report.heading("Size")
    report.table(
        ["", "bytes", "change"],
        [["originals", f"{before:,}", ""], ["prepared", f"{after:,}", f"{100 * (after / before - 1):+.2f}%"]],
    )
    report.text(
        f"Per file: median {100 * statistics.median(growth):+.2f}%, largest {100 * max(growth):+.2f}% "
        f"({rows[int(np.argmax(growth))]['name']}), smallest {100 * min(growth):+.2f}%; "
        f"{sum(g > 0.025 for g in growth)} of {len(rows)} files grow by more than 2.5%."
    )
    report.heading(f"The {min(args.top, len(rows))} files with the longest segments")
    report.table(
        ["file", "size", "MCUs per row", "interval", "segments", "longest", "median", "change"],
        [
            [
                r["name"],
                r["size"],
                r["per_row"],
                r["interval"],
                len(r["lengths"]),
                max(r["lengths"]),
                f"{statistics.median(r['lengths']):.0f}",
                f"{100 * (r['after'] / r['before'] - 1):+.2f}%",
            ]
            for r in sorted(rows, key=lambda r: -max(r["lengths"]))[: args.top]
        ],
        align="llrrrrrr",
    )
    if skipped:
        report.text("Left out: " + "; ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    print(report.to_markdown(), end="")
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
