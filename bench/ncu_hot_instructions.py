"""Where a kernel's warps spend their time, instruction by instruction, from the per-instruction tables that
bench/gpu_kernels_ncu.sh writes (Nsight Compute's source page as CSV, SASS with its warp stall samples).

For each OUTDIR/source_<kernel>.csv: the stall reasons' shares of the kernel's samples, then the instructions
with the most samples, each with its offset from the kernel's first instruction (stable from run to run of the
same build, where the absolute addresses are not), its share of the samples, how often a warp executed it, the
threads of the warp active when it did, and the stall reason with the most samples on it.

    python bench/ncu_hot_instructions.py OUTDIR [--top 25]

bench/gpu_kernels_ncu.sh runs it at its end and keeps its output as OUTDIR/hot_instructions.txt.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
THREADS = "Avg. Threads Executed"
NOT_ISSUED = "(Not Issued)"


def _number(text: str) -> float:
    text = text.replace(",", "").strip()
    return float(text) if text else 0.0


def read_source(path: Path) -> tuple[str, list[dict[str, str]]]:
    """(the kernel's name, its instructions' rows): the file's first line names the kernel, its second is the
    header."""
    with path.open(newline="") as f:
        lines = list(csv.reader(f))
    if len(lines) < 2 or not lines[0] or lines[0][0] != "Kernel Name":
        raise ValueError(f"{path}: not an Nsight Compute source page (no 'Kernel Name' line first)")
    name = lines[0][1] if len(lines[0]) > 1 else path.stem
    header = lines[1]
    for column in ("Address", "Source", SAMPLES, EXECUTED):
        if column not in header:
            raise ValueError(f"{path}: no {column!r} column")
    rows = [dict(zip(header, row)) for row in lines[2:] if len(row) >= len(header) and row[0].strip()]
    return name, rows


def report(name: str, rows: list[dict[str, str]], top: int) -> str:
    """The stall reasons' shares and the `top` instructions with the most samples, as text."""
    total = sum(_number(r[SAMPLES]) for r in rows)
    out = [f"{name}: {len(rows)} instructions, {total:,.0f} samples"]
    if total <= 0:
        return "\n".join(out + ["  no samples"])
    stalls = [h for h in rows[0] if h.startswith("stall_") and NOT_ISSUED not in h]  # rows: total > 0
    shares = sorted(((sum(_number(r[h]) for r in rows) / total, h[len("stall_") :]) for h in stalls), reverse=True)
    out.append("  stall reasons: " + ", ".join(f"{reason} {share:.1%}" for share, reason in shares if share > 0))
    base = int(rows[0]["Address"], 16)
    columns = ("offset", ">8"), ("samples", ">7"), ("executed", ">11"), ("threads", ">7"), ("most waited on", "<16")
    out.append("  " + "  ".join(f"{name:{spec}}" for name, spec in columns) + "  instruction")
    for r in sorted(rows, key=lambda r: -_number(r[SAMPLES]))[:top]:
        waited = max(stalls, key=lambda h: _number(r[h]), default="")[len("stall_") :]
        offset, share = int(r["Address"], 16) - base, _number(r[SAMPLES]) / total
        out.append(
            f"  {offset:>#8x}  {share:>7.1%}  {_number(r[EXECUTED]):>11,.0f}  {_number(r.get(THREADS, '0')):>7.1f}"
            f"  {waited:<16}  {r['Source'].strip()}"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path, help="bench/gpu_kernels_ncu.sh's OUTDIR")
    parser.add_argument("--top", type=int, default=25, help="instructions listed per kernel")
    args = parser.parse_args(argv)
    sources = sorted(args.outdir.glob("source_*.csv"))
    if not sources:
        print(f"no source_*.csv in {args.outdir}", file=sys.stderr)
        return 1
    for path in sources:
        if path.stat().st_size == 0:  # ncu found no launch of that kernel
            continue
        print(report(*read_source(path), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
