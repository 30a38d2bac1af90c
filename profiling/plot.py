"""A PNG of the step-time distributions per pipeline and of where the step time goes."""

from __future__ import annotations

import textwrap

import numpy as np

from .train_loop import RunResult

_PHASE_COLORS = {
    "data_wait": "tab:red",
    "gpu_decode": "tab:purple",
    "gpu_transform": "tab:pink",
    "h2d": "tab:orange",
    "compute": "tab:blue",
}


def plot_step_times(results: dict[str, RunResult], path: str, title: str | None = None) -> str:
    """Write the PNG; `title` (the settings of the run) heads the figure and is the PNG's Title."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed (and none on a server)
    import matplotlib.pyplot as plt

    names = list(results)
    fig, (ax_dist, ax_split) = plt.subplots(1, 2, figsize=(11, 4.5))

    totals = [np.asarray(results[n].steps["total"]) * 1000.0 for n in names]
    ax_dist.boxplot(totals, showfliers=True)
    ax_dist.set_xticks(range(1, len(names) + 1), names)
    for i, t in enumerate(totals, start=1):
        jitter = np.random.default_rng(i).uniform(-0.12, 0.12, size=len(t))
        ax_dist.scatter(i + jitter, t, s=8, alpha=0.5, color="gray", zorder=3)
    ax_dist.set_ylabel("step time (ms)")
    ax_dist.set_title("step time per measured step")
    ax_dist.set_ylim(bottom=0)

    bottom = np.zeros(len(names))
    for phase, color in _PHASE_COLORS.items():
        means = np.array(
            [np.mean(results[n].steps[phase]) * 1000.0 if phase in results[n].steps else 0.0 for n in names]
        )
        if not means.any():
            continue
        ax_split.bar(names, means, bottom=bottom, color=color, label=phase.replace("_", " "))
        bottom += means
    ax_split.set_ylabel("mean time per step (ms)")
    ax_split.set_title("where the step goes")
    ax_split.legend()

    if title:
        fig.suptitle("\n".join(textwrap.fill(line, 110) for line in title.splitlines()), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Title": title} if title else None)
    plt.close(fig)
    return path
