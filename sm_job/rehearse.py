"""Rehearse a SageMaker training job locally: the container layout in a folder, train.py under torchrun.

    python -m sm_job.rehearse                         # 2 ranks on the CPU, empty build cache, checks
    python -m sm_job.rehearse --inject-failure 1:3    # rank 1 raises at step 3: the job must fail

What SageMaker would do on one instance, without AWS or a container: the /opt/ml tree is made under
<dir>/opt_ml and named by SAGEMAKER_BASE_DIR (the training toolkit's base-dir variable) and the SM_*
variables; input/config/hyperparameters.json (values JSON-encoded, as the SDK writes them) and
resourceconfig.json are written; the source directory is staged into opt_ml/code
(sm_job/source_dir.py) and train.py is started there the way the toolkit's torch_distributed
launcher starts it: `torchrun --nnodes 1 --nproc_per_node N train.py --key value ...`. The build
cache is <dir>/local_scratch/custom_op_cache, empty unless --cache-dir names another, with
CUSTOM_OP_FORCE_JIT=1 so that an installed prebuilt library cannot hide the build. <dir>/tmp stands
for the instance's /tmp: the job's TMPDIR, so that what torchrun and the ranks leave in temporary
folders (torchelastic_* logs among them) stays in <dir>.

Then it checks what a job must leave behind: the compiler ran once (builds.log), every rank trained
every step (its steps.jsonl), the model is in the model dir and loads, traces and summaries are in
the output data dir, and nothing of the build cache is in either. With --inject-failure it checks
instead that the command failed (non-zero, within --timeout) and that the rank's error is in its
output. Exit status 0 when every check passed. Without --dir, the rehearsal runs in a new temporary
folder, removed after a rehearsal whose checks all passed (unless --keep) and kept for inspection
after one that failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _here:
        sys.path.pop(0)
    sys.path.insert(0, os.path.dirname(_here))

from sm_job import source_dir  # noqa: E402

HOST = "algo-1"
# Small enough for a 2-core machine: ~100x130 JPEGs, 64x64 windows, 56x56 inputs.
DEFAULT_HYPERPARAMETERS = {
    "num-images": 32,
    "image-size": "96x128",
    "crop-size": 64,
    "output-size": 56,
    "batch-size": 4,
    "steps": 6,
    "warmup": 1,
    "profile-steps": 1,
    "log-every": 1,
}


@dataclass
class Layout:
    root: Path

    @property
    def base(self) -> Path:
        return self.root / "opt_ml"

    @property
    def config(self) -> Path:
        return self.base / "input" / "config"

    @property
    def data(self) -> Path:
        return self.base / "input" / "data"

    @property
    def code(self) -> Path:
        return self.base / "code"

    @property
    def model(self) -> Path:
        return self.base / "model"

    @property
    def output(self) -> Path:
        return self.base / "output"

    @property
    def output_data(self) -> Path:
        return self.output / "data"

    @property
    def default_cache(self) -> Path:
        return self.root / "local_scratch" / "custom_op_cache"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"


@dataclass
class Rehearsal:
    command: list
    returncode: Optional[int]
    seconds: float
    timed_out: bool
    log: str
    layout: Layout
    cache_dir: Path
    nproc: int
    steps: int
    problems: list = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def prepare(layout: Layout, hyperparameters: dict, num_gpus: int, data: Optional[str]) -> dict:
    """Write the /opt/ml tree and return the SM_* environment a SageMaker host would have."""
    for d in (layout.config, layout.data, layout.model, layout.output_data):
        d.mkdir(parents=True, exist_ok=True)
    # The v2 SDK JSON-encodes every value; train.py must decode them as the toolkit does.
    (layout.config / "hyperparameters.json").write_text(
        json.dumps({k: json.dumps(v) for k, v in hyperparameters.items()}, indent=1)
    )
    resources = {"current_host": HOST, "hosts": [HOST], "network_interface_name": "lo"}
    (layout.config / "resourceconfig.json").write_text(json.dumps(resources))
    channels = {}
    if data:
        (layout.data / "train").symlink_to(Path(data).resolve(), target_is_directory=True)
        channels["train"] = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}
    (layout.config / "inputdataconfig.json").write_text(json.dumps(channels))
    source_dir.stage(layout.code)
    env = {
        "SAGEMAKER_BASE_DIR": str(layout.base),
        "SM_MODEL_DIR": str(layout.model),
        "SM_OUTPUT_DIR": str(layout.output),
        "SM_OUTPUT_DATA_DIR": str(layout.output_data),
        "SM_INPUT_DIR": str(layout.base / "input"),
        "SM_INPUT_CONFIG_DIR": str(layout.config),
        "SM_CHANNELS": json.dumps(sorted(channels)),
        "SM_HPS": json.dumps(hyperparameters),
        "SM_HOSTS": json.dumps([HOST]),
        "SM_CURRENT_HOST": HOST,
        "SM_NUM_GPUS": str(num_gpus),
        "SM_NUM_CPUS": str(os.cpu_count() or 1),
        "SM_RESOURCE_CONFIG": json.dumps(resources),
        "SM_USER_ENTRY_POINT": source_dir.ENTRY_POINT,
    }
    if data:
        env["SM_CHANNEL_TRAIN"] = str(layout.data / "train")
    return env


def job_environment(layout: Layout, hyperparameters: dict, num_gpus: int, data: Optional[str], cache: Path) -> dict:
    """The /opt/ml tree written, and the environment torchrun starts in: this process's, the SM_*
    variables, the build cache, and a TMPDIR inside the layout (see the module's docstring)."""
    env = dict(os.environ)
    env.update(prepare(layout, hyperparameters, num_gpus, data))
    layout.tmp.mkdir(parents=True, exist_ok=True)
    env.update(CUSTOM_OP_CACHE_DIR=str(cache), CUSTOM_OP_FORCE_JIT="1", PYTHONUNBUFFERED="1", TMPDIR=str(layout.tmp))
    return env


def _cli_args(hyperparameters: dict) -> list:
    # As the toolkit passes them: --key value, keys as written in the job.
    args = []
    for k, v in hyperparameters.items():
        args += [f"--{k}", v if isinstance(v, str) else json.dumps(v)]
    return args


def run(
    root: str | os.PathLike,
    *,
    nproc: int = 2,
    workers: int = 2,
    hyperparameters: Optional[dict] = None,
    cache_dir: Optional[str] = None,
    data: Optional[str] = None,
    inject_failure: Optional[str] = None,
    num_gpus: int = 0,
    timeout: float = 600.0,
    echo: bool = False,
) -> Rehearsal:
    """Lay out the container under `root` (a new or empty folder), run train.py under torchrun, check."""
    layout = Layout(Path(root))
    hps = {**DEFAULT_HYPERPARAMETERS, "workers": workers, **(hyperparameters or {})}
    if inject_failure:
        hps["inject-failure"] = inject_failure
    cache = Path(cache_dir) if cache_dir else layout.default_cache
    env = job_environment(layout, hps, num_gpus, data, cache)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc),
        source_dir.ENTRY_POINT,
        *_cli_args(hps),
    ]
    log_path = layout.root / "rehearsal.log"
    builds_before = build_count(cache)
    started = time.monotonic()
    timed_out = False
    with open(log_path, "w") as log:
        # A session of its own, so a timeout ends torchrun, its ranks, their workers and compilers.
        proc = subprocess.Popen(
            command,
            cwd=layout.code,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        deadline = started + timeout
        try:
            import selectors

            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                if not sel.select(timeout=1.0):
                    if proc.poll() is not None:
                        break
                    continue
                line = proc.stdout.readline()
                if not line:
                    break
                log.write(line)
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()
        finally:
            if timed_out or proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL if timed_out else signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                rest, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rest, _ = proc.communicate()
            if rest:
                log.write(rest)
                if echo:
                    sys.stdout.write(rest)
    result = Rehearsal(
        command=command,
        returncode=None if timed_out else proc.returncode,
        seconds=time.monotonic() - started,
        timed_out=timed_out,
        log=log_path.read_text(),
        layout=layout,
        cache_dir=cache,
        nproc=nproc,
        steps=int(hps["steps"]),
    )
    result.facts["builds_before"] = builds_before
    if inject_failure:
        check_failure(result, inject_failure)
    else:
        # The GPU pipelines compile a second library, the GPU one.
        libraries = 2 if hps.get("pipeline") in ("gpu", "gpu-rrc") else 1
        check_success(result, profile=int(hps.get("profile-steps", 0)) > 0, libraries=libraries)
    return result


def build_count(cache_dir: Path) -> int:
    log = cache_dir / "custom_op" / "builds.log"
    return len(log.read_text().splitlines()) if log.is_file() else 0


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def check_success(r: Rehearsal, profile: bool, libraries: int = 1) -> None:
    p = r.problems
    lay = r.layout
    if r.timed_out:
        p.append(f"timed out after {r.seconds:.0f} s")
    elif r.returncode != 0:
        p.append(f"torchrun exited with {r.returncode}")
    builds = build_count(r.cache_dir)
    r.facts["builds"] = builds
    fresh = r.facts.get("builds_before", 0) == 0
    compiled_by = [line for line in r.log.splitlines() if "compiled here: yes" in line]
    r.facts["ranks_that_compiled"] = len(compiled_by)
    r.facts["ranks_that_loaded"] = sum("custom_op jit library" in line for line in r.log.splitlines())
    # Only an empty cache says how many compiles to expect; a reused one may need none, or new
    # ones when the C++ sources changed since.
    if fresh and builds != libraries:
        p.append(f"builds.log in {r.cache_dir} has {builds} compiles, expected exactly {libraries}")
    for rank in range(r.nproc):
        rank_dir = lay.output_data / f"rank{rank}"
        steps = rank_dir / "steps.jsonl"
        lines = steps.read_text().splitlines() if steps.is_file() else []
        r.facts[f"rank{rank}_steps"] = len(lines)
        if len(lines) != r.steps:
            p.append(f"rank {rank} logged {len(lines)} steps in {steps}, expected {r.steps}")
        elif any(json.loads(line)["rank"] != rank for line in lines):
            p.append(f"{steps} has lines of another rank")
        if not (rank_dir / "summary.json").is_file():
            p.append(f"no {rank_dir / 'summary.json'}")
        traces = sorted(rank_dir.glob("*.pt.trace.json"))
        r.facts[f"rank{rank}_traces"] = len(traces)
        if profile and not traces:
            p.append(f"no torch.profiler trace in {rank_dir}")
        if not list(rank_dir.glob("events.out.tfevents.*")):
            p.append(f"no TensorBoard event file in {rank_dir}")
    summary = lay.output_data / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        r.facts["world_size"] = s.get("world_size")
        if s.get("world_size") != r.nproc or len(s.get("ranks", [])) != r.nproc:
            p.append(f"{summary} covers {len(s.get('ranks', []))} ranks, expected {r.nproc}")
    else:
        p.append(f"no job summary {summary}")
    model = lay.model / "model.pt"
    if not model.is_file() or not (lay.model / "model.json").is_file():
        p.append(f"no model.pt / model.json in {lay.model}")
    else:
        import torch

        state = torch.load(model, map_location="cpu", weights_only=True)
        r.facts["model_tensors"] = len(state)
        if not state or any(k.startswith("module.") for k in state):
            p.append(f"{model} is empty or holds the DDP wrapper's keys (module.*), not the model's")
    for folder in (lay.model, lay.output):
        if _inside(r.cache_dir, folder):
            p.append(f"the build cache {r.cache_dir} is inside {folder}, which SageMaker uploads")
        leaked = [str(f) for f in folder.rglob("*") if f.suffix in (".so", ".lock", ".o")]
        if leaked:
            p.append(f"build files in {folder}: {leaked[:3]}")


def check_failure(r: Rehearsal, inject_failure: str) -> None:
    p = r.problems
    rank = inject_failure.split(":")[0]
    if r.timed_out:
        p.append(f"the job hung: still running after {r.seconds:.0f} s")
    elif r.returncode == 0:
        p.append("torchrun exited with 0 although a rank failed")
    expected = f"injected failure on rank {rank}"
    if expected not in r.log:
        p.append(f"the rank's error ({expected!r}) is not in the output")
    r.facts["returncode"] = r.returncode
    r.facts["error_in_output"] = expected in r.log
    r.facts["model_written"] = (r.layout.model / "model.pt").exists()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sm_job.rehearse",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--dir",
        help="folder for the container layout, kept (default: a new temporary folder, removed when every check passed)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder of a rehearsal that passed")
    ap.add_argument("--nproc", type=int, default=2, help="torchrun --nproc_per_node (default: 2)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank (default: 2)")
    ap.add_argument(
        "--num-gpus", type=int, default=0, help="SM_NUM_GPUS: 0 trains on the CPU (default), else each rank on its GPU"
    )
    ap.add_argument("--cache-dir", help="build cache to use (default: an empty one under --dir)")
    ap.add_argument("--data", help="JPEG folder to mount as the 'train' channel (default: none: synthetic)")
    ap.add_argument(
        "--inject-failure",
        metavar="RANK:WHEN",
        help="make a rank fail (RANK:STEP, RANK:start, RANK:start:SECONDS) and check that the job fails with its error",
    )
    ap.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE", help="hyperparameter override")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before the job counts as hung")
    args = ap.parse_args(argv)
    if args.dir and Path(args.dir).exists() and any(Path(args.dir).iterdir()):
        ap.error(f"{args.dir} is not empty")
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sm_job-rehearsal-"))
    hps = dict(kv.split("=", 1) for kv in args.hp)
    print(f"rehearsal in {root}", flush=True)
    r = run(
        root,
        nproc=args.nproc,
        workers=args.workers,
        hyperparameters=hps,
        cache_dir=args.cache_dir,
        data=args.data,
        inject_failure=args.inject_failure,
        num_gpus=args.num_gpus,
        timeout=args.timeout,
        echo=True,
    )
    kept = bool(args.dir) or args.keep or not r.ok
    print(
        json.dumps(
            {
                "ok": r.ok,
                "returncode": r.returncode,
                "seconds": round(r.seconds, 1),
                "facts": r.facts,
                "problems": r.problems,
                "dir": str(root),
                "dir_kept": kept,
                "command": shlex.join(map(str, r.command)),
            },
            indent=2,
        )
    )
    if kept:
        print(f"rehearsal folder kept: {root}", flush=True)
    else:
        shutil.rmtree(root, ignore_errors=True)
        print(f"rehearsal folder removed: {root} (--keep keeps it)", flush=True)
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
