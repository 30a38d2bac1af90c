"""How soon the chunked decode's chunks fall in step, on the CPU: for a folder of photos (and generated ones),
after each number of stage 2's rounds, how many chunks are still out of step (the walk of stage 3 decodes them
again, one thread an image, within a budget; an image over it goes to the CPU path), how many blocks the
rounds decode, and how many of those went into the records the walk then takes (the rest are the price of
not knowing, in a round, which of a chunk's ends is the true one).

    python bench/chunk_sync_rounds.py                                     # the ImageNet sample, 1 to 4 rounds
    python bench/chunk_sync_rounds.py --imagenet ~/photos --out bench/results/chunk_sync_rounds.md

No GPU is needed: the CPU harness (tests/jpeg_core_harness.cpp) runs the very stages the GPU's kernels run
(custom_op/csrc/jpeg_core/sync_decode.h), each chunk on its own as a thread would, with the GPU decoder's
chunk size, parts and slots (jpeg_core's slot_layout), through the window of the middle third of the rows. The
counts say what the rounds leave to the walk, not how long anything takes: bench/gpu_phases_ab.sh times the
kernels. Large photos (generated 4000x3000 ones, whose scans are past jpeg_core's kLargeScanBytes) get a table of
their own, by layout at the GPU's rounds: theirs (the GPU's larger chunks, one guess and a free slot a chunk) beside
the smaller files' layout (a slot for each place of the MCU, three guesses) in both chunk sizes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import common  # noqa: E402

import jpeg_core_build as core  # noqa: E402


def gpu_runs(files: list[bytes], chunk_bytes: int, parts: int, rounds: int, slots=-1, guesses=0) -> list[dict]:
    """Each decodable file's run with the GPU decoder's parts and, by default, slots (jpeg_core's slot_layout)."""
    runs = core.chunked(
        files, [chunk_bytes], rounds=rounds, sweep=True, band=True, parts=parts, slots=slots, guesses=guesses
    )
    return [d["runs"][0] for d in runs if d.get("runs")]


def table_rows(runs: list[dict], first: int | str, budget: int) -> list[str]:
    """A table's row: `first` (the rounds, or the layout), then the counts of COLUMNS."""
    left = [r["unsynced_before_sweep"] for r in runs]
    flagged = sum(r["flags"] != 0 or r["coef_mismatch_blocks"] != 0 for r in runs)
    return [
        str(first),
        f"{sum(left):,}",
        f"{sum(x > 0 for x in left):,}",
        str(max(left, default=0)),
        f"{sum(x > budget for x in left):,}",
        f"{sum(r['chunks'] * r['guesses'] for r in runs):,}",
        f"{sum(r['round_blocks'] for r in runs):,}",
        f"{sum(r['round_blocks_chosen'] for r in runs):,}",
        f"{sum(r['round_warp_blocks'] for r in runs):,}",
        f"{flagged:,}",
    ]


COLUMNS = [
    "rounds",
    "chunks out of step",
    "photos with any",
    "most in a photo",
    "photos over the walk's budget",
    "chunk decodes of stage 1 (its guesses)",
    "blocks the rounds decode",
    "of them into records the walk takes",
    "as warps wait (their slowest of 32 chunks)",
    "photos flagged or inexact",
]


MEETING_COLUMNS = ["part ends a chunk", "blocks the rounds decode", "as warps wait (32 x their slowest chunk's)"]


def meeting_row(runs: list[dict], parts: int) -> list[str]:
    """A row of the table by where the rounds' decodes may meet: their blocks, and as warps wait, as shares of
    rounds whose decodes all run to their chunk's end."""
    full = sum(r["round_blocks_full"] for r in runs)
    met = sum(r["round_blocks"] for r in runs)
    warps = 32 * sum(r["round_warp_blocks"] for r in runs)
    return [str(parts), f"{met:,} ({met / full:.1%})", f"{warps:,} ({warps / full:.1%})"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_imagenet_option(parser)
    parser.add_argument("--rounds", type=int, nargs="+", default=[1, 2, 3, 4], help="stage 2's rounds to try")
    parser.add_argument("--n-generated", type=int, default=24, help="generated 500x375 photos (0: skip the case)")
    parser.add_argument("--n-large", type=int, default=2, help="generated 4000x3000 photos (0: skip the case)")
    common.add_report_options(parser)
    args = parser.parse_args(argv)
    if core.unavailable_reason() is not None:
        sys.exit(f"cannot build the CPU harness: {core.unavailable_reason()}")
    chunk_bytes = core.gpu_constant(core.GPU_EXECUTOR, "kChunkBytes")
    budget = core.gpu_constant(core.GPU_DECODER, "kSweepBudget")
    gpu_rounds = core.gpu_constant(core.GPU_DECODER, "kSyncRounds")
    parts = core.gpu_constant(core.GPU_DECODER_HEADER, "kMaxChunkParts")
    report = common.Report(
        "How soon a chunked decode's chunks fall in step (CPU harness)",
        machine=common.cpu_description(),
        commit=args.commit,
        details={
            "the GPU decoder's settings": f"chunks of {chunk_bytes} bytes in {parts} parts, {gpu_rounds} rounds, "
            f"the walk's budget {budget} chunks an image",
            "each figure": "summed over the photos (but the most in a photo)",
        },
    )
    report.text(__doc__.split("\n\n")[0].replace("\n", " "))
    cases = []
    photos = common.imagenet_files(args.imagenet)
    if photos:
        cases.append((f"{Path(args.imagenet).name}: {len(photos)} photos as they come", photos))
    if args.n_generated > 0:
        generated = common.generated_files(args.n_generated, 375, 500)
        cases.append((f"generated: {len(generated)} photo-like 500x375 files (4:2:0, q90)", generated))
    for title, files in cases:
        report.heading(title)
        rows = [table_rows(gpu_runs(files, chunk_bytes, parts, r), r, budget) for r in args.rounds]
        report.table(COLUMNS, rows)
    if args.n_large > 0:
        large = common.generated_files(args.n_large, 3000, 4000)
        large_chunk = core.gpu_constant(core.GPU_EXECUTOR, "kLargeChunkBytes")
        report.heading(f"generated: {len(large)} photo-like 4000x3000 files (4:2:0, q90), {gpu_rounds} rounds")
        layouts = [
            (f"the GPU's: chunks of {large_chunk} bytes, one guess and a free slot", large_chunk, -1, 0),
            (f"chunks of {large_chunk} bytes, a slot a place of the MCU, three guesses", large_chunk, 6, 3),
            (f"chunks of {chunk_bytes} bytes, a slot a place of the MCU, three guesses", chunk_bytes, 6, 3),
            (f"chunks of {chunk_bytes} bytes, one guess and a free slot", chunk_bytes, 2, 1),
        ]
        rows = [
            table_rows(gpu_runs(large, size, parts, gpu_rounds, slots, guesses), name, budget)
            for name, size, slots, guesses in layouts
        ]
        report.table(["layout"] + COLUMNS[1:], rows)
        report.text(
            "The GPU's layout by the part ends a chunk where a round's decode may meet its chunk's guess and stop "
            f"(the GPU decoder's: {parts}). Shares of the blocks of rounds whose decodes all run to their chunk's "
            "end. A warp's lanes take neighbouring chunks and the warp lasts as long as its slowest: the last "
            "column counts each warp as 32 of its slowest chunk's blocks."
        )
        rows = [
            meeting_row(gpu_runs(large, large_chunk, p, gpu_rounds), p)
            for p in (parts, 2 * parts, 4 * parts, 16 * parts)
        ]
        report.table(MEETING_COLUMNS, rows)
    if args.out:
        report.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
