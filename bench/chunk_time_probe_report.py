"""The report of bench/chunk_time_probe.sh: the probe's output (its runs from the guesses and from the true
starts, after the machine's lines) as bench/results/chunk_time_probe.md and the .json beside it.

    python bench/chunk_time_probe_report.py PROBE_OUTPUT --out bench/results/chunk_time_probe.md
                                            [--command ...] [--commit ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TITLE = "What sets the length of a chunked decode's launch (bench/chunk_time_probe)"

WHAT = (
    "Every chunk of a batch of photos decoded by the chunked decode's stages 1 and 2 (jpeg_core's "
    "decode_chunk), a thread a chunk in the GPU decoder's layout (neighbouring chunks in a warp), each thread "
    "timing its decode with its multiprocessor's clock; once from stage 1's guesses, once from the true "
    "starts. A launch lasts as long as its slowest warp. For the true starts, two least-squares fits of each "
    "warp's cycles: against the AC codes of its busiest thread, and against its threads' blocks in lockstep "
    "(each round of blocks as long as the longest of the warp's blocks in that round)."
)


def build_report(text: str, command: str, commit: str | None, echo: bool = True) -> common.Report:
    """The report of the probe's output `text`: the machine's lines (machine_lines in bench/device_env.sh)
    give the date, the GPU and the versions; the rest is the probe's."""
    lines = text.rstrip("\n").splitlines()
    date = lines[0].strip() if lines and re.match(r"\d{4}-\d\d-\d\dT", lines[0]) else None
    # nvidia-smi's CSV: its header, then a row a GPU whose first field is the name.
    header = next((i for i, line in enumerate(lines) if line.startswith("name, driver_version")), None)
    gpu = lines[header + 1].split(",")[0].strip() if header is not None and header + 1 < len(lines) else "?"
    torch_line = next((line for line in lines if line.startswith("torch ")), "")
    cores = next((line for line in lines if line.startswith("cores: ")), "")
    found = re.search(r"commit: (\S+)", cores)
    probe = [line for line in lines if re.match(r"\d+ photos, |a warp's cycles against|against the blocks", line)]
    if not probe:
        raise ValueError("the probe's output holds no result line (did it run?)")
    report = common.Report(
        TITLE,
        machine=f"{gpu}; {cores.split(';')[0].removeprefix('cores: ')} CPU cores" if cores else gpu,
        command=command,
        commit=commit or (found.group(1) if found else None),
        date=date,
        details={"versions": torch_line or "?", "photos": "the ImageNet sample, 64 in a seeded random order"},
        echo=echo,
    )
    report.text(WHAT)
    report.code("\n".join(probe))
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path, help="the probe's output, machine lines first")
    parser.add_argument("--out", type=Path, default=Path("bench/results/chunk_time_probe.md"))
    parser.add_argument("--command", default="bash bench/chunk_time_probe.sh")
    parser.add_argument("--commit", default=None, help="the commit measured (default: the output's)")
    args = parser.parse_args(argv)
    build_report(args.output.read_text(), args.command, args.commit).write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
