"""Where the entropy-coded bytes a window needs end, against an estimate from its rows: for a folder of photos
(and generated ones), each MCU row's share of the scan's bytes up to and including it, against its share of
the rows. A decode of a window reads the scan through the window's last MCU row (DC prediction runs through
all of it), and where that lies in the bytes of a file without restart markers is known only once the file is
decoded. An estimate est(f) = min(1, a * f + b) of the share of the bytes through the rows' share f would let
the GPU decoder upload and decode only that much, and decode again with the whole file the windows it falls
short for. For each (a, b): the share of last rows it falls short for, and the bytes it reads on average
against what the rows need.

    python bench/window_bytes.py                                   # the ImageNet sample and generated photos
    python bench/window_bytes.py --imagenet ~/photos --out bench/results/window_bytes.md

No GPU is needed. Each row's bytes are those of prepare_jpeg's lossless copy with one restart segment an MCU
row (optimised Huffman tables, as most photos' encoders write), whose markers say where each row's data ends.
Every MCU row counts as a last row once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import common  # noqa: E402

import custom_op  # noqa: E402

ESTIMATES = [(1.0, 0.0), (1.1, 0.02), (1.25, 0.0), (1.25, 0.05), (1.5, 0.0), (1.5, 0.05), (2.0, 0.0)]
COLUMNS = [
    "estimate",
    "last rows it falls short for",
    "photos with any",
    "bytes read (mean share)",
    "bytes the rows need (mean share)",
]


def row_shares(data: bytes):
    """Each MCU row's share of the scan's bytes through it (None for a file prepare_jpeg refuses)."""
    try:
        copy = custom_op.prepare_jpeg(data, restart_mcus=65535)  # above any MCUs per row: a segment a row
    except (ValueError, RuntimeError):
        return None
    lengths = np.asarray(common.scan_facts(copy)[2], dtype=np.float64)
    return np.cumsum(lengths) / lengths.sum()


def case_rows(shares: list[np.ndarray]) -> list[list[str]]:
    rows = []
    for a, b in ESTIMATES:
        short = rows_seen = photos_short = 0
        read = needed = 0.0
        for s in shares:
            f = np.arange(1, len(s) + 1) / len(s)
            est = np.minimum(1.0, a * f + b)
            over = s > est + 1e-12
            short += int(over.sum())
            photos_short += int(over.any())
            rows_seen += len(s)
            read += float(est.sum())
            needed += float(s.sum())
        rows.append(
            [
                f"min(1, {a:g} f + {b:g})",
                f"{short:,} of {rows_seen:,} ({short / rows_seen:.2%})",
                f"{photos_short} of {len(shares)}",
                f"{read / rows_seen:.3f}",
                f"{needed / rows_seen:.3f}",
            ]
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_photo_options(parser, medium=(24, 375, 500), large=(2, 3000, 4000))
    common.add_report_options(parser)
    args = parser.parse_args(argv)
    report = common.Report(
        "Where a window's entropy-coded bytes end, against an estimate from its rows (CPU)",
        machine=common.cpu_description(),
        commit=args.commit,
        details={"each figure": "over every MCU row of every photo, each row taken as a window's last"},
    )
    report.text(__doc__.split("\n\n")[0].replace("\n", " "))
    for title, files, _ in common.photo_cases(args):
        shares = [s for s in (row_shares(d) for d in files) if s is not None]
        worst = max(float(np.max(s / (np.arange(1, len(s) + 1) / len(s)))) for s in shares)
        report.heading(title)
        report.text(
            f"{len(shares)} photos read; the most a row's share of the bytes exceeds its share of the rows: "
            f"{worst:.2f} times."
        )
        report.table(COLUMNS, case_rows(shares))
    if args.out:
        report.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
