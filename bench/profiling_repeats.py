"""Run `python -m profiling --compare A,B` several times, alternating the order, and print the speedups.

One run of the tool is one measurement; on a small or shared machine a single one can be off by tens of
percent (other processes, which pipeline ran first). This repeats it, reverses the order every other
round, and prints each round's p50 step times and ratio with the CPU time that other processes used during
the round (in cores: 0.5 means half a core was busy with something else on average), then the median
ratio over all rounds and over the quiet ones. Extra arguments go to the tool unchanged.

    python bench/profiling_repeats.py --rounds 4 -- --workers 1 --steps 100
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--pipelines", default="pil,roi", help="exactly two, the first is the baseline")
    p.add_argument("tool_args", nargs=argparse.REMAINDER, help="arguments for python -m profiling (after --)")
    args = p.parse_args()
    base, other = args.pipelines.split(",")
    extra = [a for a in args.tool_args if a != "--"]
    ratios, quiet = [], []
    print(
        f"{'round':>5} {'order':>9} {base + ' p50 s':>11} {other + ' p50 s':>11} {'speedup':>8}  "
        f"{'other procs (cores)':>19}  wall"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [base, other] if r % 2 == 0 else [other, base]
            logdir = os.path.join(tmp, f"round{r}")
            busy0, ours0 = busy_cpu_seconds(), children_cpu_seconds()
            cmd = [sys.executable, "-m", "profiling", "--compare", ",".join(order), "--logdir", logdir, *extra]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr, file=sys.stderr)
                return proc.returncode
            wall = time.perf_counter() - t0
            others = max(0.0, (busy_cpu_seconds() - busy0) - (children_cpu_seconds() - ours0)) / wall
            summary = json.loads(Path(logdir, "summary.json").read_text())
            p50 = {n: summary["pipelines"][n]["phases_s"]["total"]["p50"] for n in (base, other)}
            ratio = p50[base] / p50[other]
            ratios.append(ratio)
            if others < QUIET_CORES:
                quiet.append(ratio)
            print(
                f"{r:>5} {','.join(order):>9} {p50[base]:>11.4f} {p50[other]:>11.4f} {ratio:>7.2f}x  "
                f"{others:>19.2f}  {wall:.0f} s",
                flush=True,
            )
            if r == 0:
                print(proc.stdout.split("\n\n")[1] if "\n\n" in proc.stdout else proc.stdout, flush=True)
    print(
        f"median speedup of {other} over {base} (p50 step): {statistics.median(ratios):.2f}x "
        f"over {len(ratios)} rounds (min {min(ratios):.2f}x, max {max(ratios):.2f}x)"
    )
    if quiet:
        print(
            f"over the {len(quiet)} quiet rounds (other processes < {QUIET_CORES} cores): median "
            f"{statistics.median(quiet):.2f}x (min {min(quiet):.2f}x, max {max(quiet):.2f}x)"
        )
    else:
        print(f"no quiet round (other processes < {QUIET_CORES} cores): the machine was busy throughout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
