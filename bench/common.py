"""What the benchmark scripts share: the same random windows for every method, and the machine line
of a results file. Imported as `common` by the scripts in this folder (their own folder is on sys.path)."""

import os
import platform

import numpy as np


def random_windows(files, size, seed):
    """One size x size window per file (clipped to the image), placed uniformly, reproducible."""
    import custom_op

    rng = np.random.default_rng(seed)
    out = []
    for data in files:
        info = custom_op.read_jpeg_header(data)
        h, w = min(size, info.height), min(size, info.width)
        out.append((int(rng.integers(0, info.height - h + 1)), int(rng.integers(0, info.width - w + 1)), h, w))
    return out


def cpu_description():
    """The CPU model, the logical core count and the OS, for the results files."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}"


def commit_description(root) -> str:
    """The checkout's commit, marked "+ local changes" when the working tree differs from it."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        # The reports being rewritten in bench/results/ do not make the code differ from the commit.
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" + local changes" if dirty else "")
