"""The report of bench/sm_job_gpu_rehearsal.sh, written from what the script leaves in its OUTDIR.

    python bench/sm_job_report.py OUTDIR --out bench/results/sm_job_gpu_h100.md [--command ...] [--commit ...]

The script runs it at its end. It reads, in OUTDIR:
  env.txt                    the machine, as `key: value` lines (date, gpu (one line per GPU: name, driver,
                             memory), torch, cuda, cpus, ranks, compiler, nvjpeg)
  rehearsal_<pipeline>.log   the output of `python -m sm_job.rehearse` for each pipeline of --pipelines;
                             it ends with the rehearsal's verdict (JSON: ok, returncode, seconds, facts,
                             problems)
  summary_<pipeline>.json    the job summary that rank 0 wrote (sm_job/training.py)
  builds.log                 the compiler runs of the shared build cache
and writes the report (Markdown) and its data (JSON beside it) with bench/common.py's Report.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Report  # noqa: E402

# What each pipeline does, for the table.
PIPELINES = {
    "gpu": "gpu (nvJPEG batch decode in each rank)",
    "roi": "roi (libjpeg-turbo in {workers} DataLoader workers per rank)",
}


def read_env(path: Path) -> dict:
    """env.txt's `key: value` lines; the `gpu` lines as a list."""
    env: dict = {"gpu": []}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(": ")
        if not sep:
            continue
        if key == "gpu":
            env["gpu"].append([part.strip() for part in value.split(",")])
        else:
            env[key.strip()] = value.strip()
    return env


def verdict(log: str) -> Optional[dict]:
    """The JSON verdict that ends a rehearsal's output, or None (the rehearsal did not get that far)."""
    start = log.rfind("\n{\n")
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(log[start + 1 :])[0]
    except json.JSONDecodeError:
        return None


def machine(env: dict) -> str:
    gpus = env["gpu"]
    cpus = f"{env.get('cpus', '?')} CPUs"
    if not gpus:
        return f"no GPU listed by nvidia-smi, {cpus}"
    name, driver, memory = (gpus[0] + ["?", "?", "?"])[:3]
    if len(gpus) == 1:
        return f"{name} (driver {driver}, {memory}), {cpus}"
    return f"{len(gpus)}x {name} ({memory} each, driver {driver}), {cpus}"


def pipeline_row(name: str, index: int, verdict_: Optional[dict], summary: Optional[dict]) -> list[str]:
    config = (summary or {}).get("config", {})
    title = PIPELINES.get(name, name).format(workers=config.get("workers", "?"))
    if index > 0:
        title += ", same cache"
    if verdict_ is None:
        return [title, "no verdict in its log (the rehearsal did not finish)"] + ["-"] * 7
    facts = verdict_.get("facts", {})
    if verdict_.get("ok"):
        result = f"ok, exit {verdict_.get('returncode')}"
    else:
        result = f"failed, exit {verdict_.get('returncode')}: " + "; ".join(verdict_.get("problems", []))
    builds = facts.get("builds", "?")
    new = builds - facts.get("builds_before", 0) if isinstance(builds, int) else "?"
    ranks = range(facts.get("world_size") or len((summary or {}).get("ranks", [])) or 1)
    return [
        title,
        result,
        f"{builds} ({new} new)",
        str(facts.get("ranks_that_compiled", "?")),
        str(facts.get("ranks_that_loaded", "?")),
        ", ".join(str(facts.get(f"rank{r}_steps", "?")) for r in ranks),
        ", ".join(str(facts.get(f"rank{r}_traces", "?")) for r in ranks),
        f"{summary['step_p50_s_slowest_rank']:.3f} s" if summary else "-",
        f"{summary['images_per_s_all_ranks']:,.0f}" if summary else "-",
    ]


def build_report(
    outdir: Path, names: list[str], command: str, commit: Optional[str] = None, echo: bool = True
) -> Report:
    """The report of the rehearsals of the pipelines ``names`` (in the order they ran) in ``outdir``."""
    outdir = Path(outdir)
    env = read_env(outdir / "env.txt")
    verdicts = {}
    for n in names:
        log = outdir / f"rehearsal_{n}.log"
        verdicts[n] = verdict(log.read_text(encoding="utf-8", errors="replace")) if log.is_file() else None
    summaries = {}
    for n in names:
        path = outdir / f"summary_{n}.json"
        summaries[n] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    first = next((s for s in summaries.values() if s), {})
    config = first.get("config", {})
    libjpeg = next((r["extension"]["libjpeg_turbo_version"] for r in first.get("ranks", []) if "extension" in r), "?")
    ranks = env.get("ranks", "?")
    seconds = sum(v.get("seconds", 0) for v in verdicts.values() if v)
    report = Report(
        f"SageMaker entry point rehearsed under torchrun, {ranks} rank(s), one GPU each",
        machine=machine(env),
        command=command,
        commit=commit,
        date=env.get("date"),
        details={
            "versions": f"torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}, libjpeg-turbo {libjpeg}, "
            f"nvJPEG {env.get('nvjpeg', '?')}; compiler {env.get('compiler', '?')}",
            "each run": f"`python -m sm_job.rehearse --nproc {ranks} --num-gpus {ranks} --workers "
            f"{config.get('workers', '?')}` (a faked /opt/ml tree; torchrun, nccl + DDP, one GPU per rank), "
            f"{config.get('num_images', '?')} synthetic "
            f"{'x'.join(map(str, config.get('image_size', ['?'])))} JPEGs, batch {config.get('batch_size', '?')} "
            f"per rank, {config.get('warmup', '?')} warm-up + {config.get('steps', '?')} steps, model "
            f"{config.get('model', '?')}; the build cache empty before the first run, shared by the next",
            "wall": f"{seconds:.0f} s for the {len(names)} runs",
        },
        echo=echo,
    )
    report.table(
        [
            "pipeline",
            "result",
            "builds in the cache",
            "ranks that compiled",
            "ranks that loaded",
            "steps per rank",
            "traces per rank",
            "step p50 (slowest rank)",
            "images/s, all ranks",
        ],
        [pipeline_row(n, k, verdicts[n], summaries[n]) for k, n in enumerate(names)],
        "l" * 9,
    )
    builds = outdir / "builds.log"
    if builds.is_file():
        report.text("builds.log (one line per compiler run in the shared cache):")
        report.code(builds.read_text(encoding="utf-8"))
    report.text(
        "The small CNN makes the step short, so images/s here measures the input pipeline and DDP, not a real "
        "model. Nothing runs on AWS."
    )
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", help="the folder bench/sm_job_gpu_rehearsal.sh wrote")
    parser.add_argument("--out", required=True, help="the report (.md); its data goes to the .json beside it")
    parser.add_argument("--pipelines", default="gpu,roi", help="the pipelines rehearsed, in order (default: gpu,roi)")
    parser.add_argument("--command", default="bash bench/sm_job_gpu_rehearsal.sh", help="the command that ran")
    parser.add_argument("--commit", help="the commit line, where the checkout has no .git")
    args = parser.parse_args(argv)
    names = [n for n in args.pipelines.split(",") if n]
    build_report(Path(args.outdir), names, args.command, args.commit).write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
