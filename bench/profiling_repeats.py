"""Run `python -m profiling --compare A,B` several times, alternating the order, and report the speed-ups.

One run of the tool is one measurement; on a small or shared machine a single one can be off by tens of
percent (other processes, which pipeline ran first). This repeats it, reverses the order every other
round, and reports each round's p50 step times and ratio with the CPU time that other processes used
during the round (in cores: 0.5 means half a core was busy with something else on average), then the
median ratio over all rounds and over the quiet ones. Each --case is a set of the tool's options, run
for --rounds rounds of its own; the options after -- go to every case.

    python bench/profiling_repeats.py --rounds 4                              # one case: the tool's defaults
    python bench/profiling_repeats.py --rounds 4 -- --workers 1 --steps 100   # options for every case
    python bench/profiling_repeats.py --rounds 4 --case "" --case "--workers 2" \\
        --case "--data ../shared/data/imagenet-sample"                        # three cases in one report

The report is written to bench/results/profiling-2core.md (--out), its data to the .json beside it.
With the tool's defaults a round takes about 20 s on a quiet 2-core machine, 30 s on a busy one (the
first round also generates the data set, once per machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import Report, cpu_description, versions  # noqa: E402

# A round counts as quiet when other processes used less than this many cores on average.
QUIET_CORES = 0.1


def busy_cpu_seconds() -> float:
    """CPU seconds all processes have used since boot (Linux /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children and their descendants (the tool, its workers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_round(order: list[str], options: list[str], logdir: str) -> dict:
    """One run of the tool: its summary.json, its printed table, the wall time and the other processes'
    CPU use (cores). Raises RuntimeError with the tool's output when it fails."""
    busy0, ours0 = busy_cpu_seconds(), children_cpu_seconds()
    cmd = [sys.executable, "-m", "profiling", "--compare", ",".join(order), "--logdir", logdir, *options]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    wall = time.perf_counter() - t0
    others = max(0.0, (busy_cpu_seconds() - busy0) - (children_cpu_seconds() - ours0)) / wall
    blocks = proc.stdout.split("\n\n")
    return {
        "order": order,
        "summary": json.loads(Path(logdir, "summary.json").read_text()),
        "table": blocks[1] if len(blocks) > 1 else proc.stdout,
        "wall": wall,
        "others": others,
    }


def p50(r: dict, name: str) -> float:
    return r["summary"]["pipelines"][name]["phases_s"]["total"]["p50"]


def decode_ms(r: dict, name: str) -> float:
    return r["summary"]["pipelines"][name]["worker_ms_per_sample"]["decode"]


def settings(r: dict) -> str:
    """The data and settings of a round, from the tool's summary."""
    config, data = r["summary"]["config"], r["summary"]["dataset"]
    return (
        f"data {os.path.basename(os.path.normpath(data['root']))} ({data['files']} JPEGs, {data['layout']} layout), "
        f"model {config['model']} on {config['device']}, batch {config['batch_size']}, workers {config['workers']}, "
        f"{config['warmup']} warm-up + {config['steps']} measured steps"
    )


def spread(values: list[float], digits: int) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}-{high:.{digits}f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4, help="rounds per case (default: %(default)s)")
    p.add_argument("--pipelines", default="pil,roi", help="exactly two, the first is the baseline")
    p.add_argument(
        "--case",
        action="append",
        metavar="OPTIONS",
        help="the tool's options for one case, as one string (repeatable; default: one case, no options)",
    )
    p.add_argument(
        "--out",
        default=str(REPO / "bench" / "results" / "profiling-2core.md"),
        help="the report (.md; its data goes to the .json beside it; default: %(default)s)",
    )
    p.add_argument("--commit", help="the commit line of the report, for a checkout without .git")
    p.add_argument(
        "tool_args", nargs=argparse.REMAINDER, help="options for python -m profiling in every case (after --)"
    )
    args = p.parse_args()
    base, other = args.pipelines.split(",")
    common = [a for a in args.tool_args if a != "--"]
    cases = [shlex.split(c) for c in (args.case or [""])]

    import PIL
    import torch

    machine = cpu_description(torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
    report = Report(
        f"Step time of a training loop, {base} against {other} (`python -m profiling`)",
        machine=machine,
        commit=args.commit,
        details={
            "versions": versions(f"Pillow {PIL.__version__}"),
            "each figure": f"the p50 step time of a run of the tool, s; speed-up: {base}'s p50 step / {other}'s; "
            f"other processes: the CPU time that other processes used during the round, in cores (a round is quiet "
            f"below {QUIET_CORES})",
        },
    )
    summary_rows, sections = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k, case in enumerate(cases):
            options = case + common
            rounds = []
            for r in range(args.rounds):
                order = [base, other] if r % 2 == 0 else [other, base]
                try:
                    rounds.append(run_round(order, options, os.path.join(tmp, f"case{k}-round{r}")))
                except RuntimeError as e:
                    print(e, file=sys.stderr)
                    return 1
                last = rounds[-1]
                print(
                    f"case {k} round {r} ({','.join(order)}): {base} {p50(last, base):.4f} s, {other} "
                    f"{p50(last, other):.4f} s, {p50(last, base) / p50(last, other):.2f}x, other processes "
                    f"{last['others']:.2f} cores, {last['wall']:.0f} s",
                    flush=True,
                )
            ratios = [p50(r, base) / p50(r, other) for r in rounds]
            quiet = [ratio for ratio, r in zip(ratios, rounds) if r["others"] < QUIET_CORES]
            shown = shlex.join(options) or "(the tool's defaults)"
            summary_rows.append(
                [
                    shown,
                    rounds[0]["summary"]["config"]["workers"],
                    spread([p50(r, base) for r in rounds], 3),
                    spread([p50(r, other) for r in rounds], 3),
                    f"{statistics.median(ratios):.2f}x",
                    f"{min(ratios):.2f}-{max(ratios):.2f}",
                    f"{len(rounds)}, {len(quiet)}",
                    f"{statistics.median(quiet):.2f}x" if quiet else "-",
                    f"{statistics.median(decode_ms(r, base) for r in rounds):.2f} / "
                    f"{statistics.median(decode_ms(r, other) for r in rounds):.2f}",
                ]
            )
            sections.append((k, shown, rounds, ratios))
    report.heading("Summary")
    report.table(
        [
            "tool options",
            "workers",
            f"{base} p50 step, s",
            f"{other} p50 step, s",
            "median speed-up",
            "range",
            "rounds, quiet",
            "median over the quiet rounds",
            f"worker decode ms/sample, {base} / {other}",
        ],
        summary_rows,
        "lrrrrrrrr",
    )
    for k, shown, rounds, ratios in sections:
        report.heading(f"Case {k + 1}: {shown}")
        report.text(settings(rounds[0]) + ".")
        report.table(
            ["round", "order", f"{base} p50 s", f"{other} p50 s", "speed-up", "other processes, cores", "wall, s"],
            [
                [
                    i,
                    ",".join(r["order"]),
                    f"{p50(r, base):.4f}",
                    f"{p50(r, other):.4f}",
                    f"{ratio:.2f}x",
                    f"{r['others']:.2f}",
                    f"{r['wall']:.0f}",
                ]
                for i, (r, ratio) in enumerate(zip(rounds, ratios))
            ],
            "rlrrrrr",
        )
        report.text("The tool's table in round 0:")
        report.code(rounds[0]["table"])
    report.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
