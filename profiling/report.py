"""Statistics of the runs, the printed table, and the JSON summary."""

from __future__ import annotations

import json
import math
import platform

import numpy as np
import torch

from .train_loop import WORKER_STAGES, RunResult

# (label, phase, percentile) rows of the table; phases missing from a run print as "-".
_TIME_ROWS = [
    ("step time p50 (s)", "total", 50),
    ("step time p95 (s)", "total", 95),
    ("data wait p50 (s)", "data_wait", 50),
    ("data wait p95 (s)", "data_wait", 95),
    ("host-to-device p50 (s)", "h2d", 50),
    ("gpu decode p50 (s)", "gpu_decode", 50),
    ("gpu transforms p50 (s)", "gpu_transform", 50),
    ("compute p50 (s)", "compute", 50),
    ("compute p95 (s)", "compute", 95),
]


def run_stats(r: RunResult, batch_size: int) -> dict:
    """p50/p95/mean per phase, data-wait share, throughput, worker ms per sample."""
    phases = {}
    for name, values in r.steps.items():
        a = np.asarray(values)
        phases[name] = {
            "p50": float(np.percentile(a, 50)),
            "p95": float(np.percentile(a, 95)),
            "mean": float(a.mean()),
            "min": float(a.min()),
            "max": float(a.max()),
        }
    total = float(np.sum(r.steps["total"]))
    wait = float(np.sum(r.steps["data_wait"]))
    return {
        "phases_s": phases,
        "data_wait_share": wait / total if total > 0 else math.nan,
        "images_per_s": batch_size * len(r.steps["total"]) / total if total > 0 else math.nan,
        "worker_ms_per_sample": {k: float(np.mean(r.worker_ms[k])) for k in WORKER_STAGES},
        "measured_steps": len(r.steps["total"]),
        "skipped_files": r.skipped_files,
    }


def format_table(stats: dict[str, dict]) -> str:
    """One column per pipeline, the speedup of the p50 step over the first pipeline when there are several."""
    names = list(stats)
    width = max(10, *(len(n) + 2 for n in names))
    rows: list[tuple[str, list[str]]] = []
    for label, phase, pct in _TIME_ROWS:
        if not any(phase in s["phases_s"] for s in stats.values()):
            continue
        rows.append(
            (
                label,
                [f"{s['phases_s'][phase][f'p{pct}']:.4f}" if phase in s["phases_s"] else "-" for s in stats.values()],
            )
        )
    rows.append(("data wait share of step", [f"{100 * s['data_wait_share']:.0f}%" for s in stats.values()]))
    rows.append(("throughput (images/s)", [f"{s['images_per_s']:.1f}" for s in stats.values()]))
    for k in WORKER_STAGES:
        rows.append((f"worker {k} (ms/image)", [f"{s['worker_ms_per_sample'][k]:.3f}" for s in stats.values()]))
    if any(s["skipped_files"] for s in stats.values()):
        rows.append(("corrupt files skipped", [str(len(s["skipped_files"])) for s in stats.values()]))
    if len(names) > 1:
        base = stats[names[0]]["phases_s"]["total"]["p50"]
        rows.append(
            (
                f"speedup vs {names[0]} (p50 step)",
                [f"{base / s['phases_s']['total']['p50']:.2f}x" for s in stats.values()],
            )
        )
    label_w = max(len(label) for label, _ in rows)
    lines = [" " * label_w + "".join(n.rjust(width) for n in names)]
    lines += [label.ljust(label_w) + "".join(v.rjust(width) for v in values) for label, values in rows]
    return "\n".join(lines)


def speedups(stats: dict[str, dict]) -> dict[str, float]:
    names = list(stats)
    base = stats[names[0]]["phases_s"]["total"]["p50"]
    return {n: base / stats[n]["phases_s"]["total"]["p50"] for n in names}


def environment() -> dict:
    import os

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch_threads": torch.get_num_threads(),
    }


def write_summary(
    path: str,
    *,
    config: dict,
    dataset: dict,
    results: dict[str, RunResult],
    stats: dict[str, dict],
    plot_path: str | None,
    command: str,
) -> None:
    summary = {
        "command": command,
        "config": config,
        "dataset": dataset,
        "environment": environment(),
        "pipelines": {
            name: {
                **stats[name],
                "num_files": r.num_files,
                "log_dir": r.log_dir,
                "trace_files": r.trace_files,
                "steps_s": r.steps,
                "worker_ms_per_sample_per_step": r.worker_ms,
                "losses": r.losses,
            }
            for name, r in results.items()
        },
        "speedup_vs_first_p50": speedups(stats),
        "plot": plot_path,
    }
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
