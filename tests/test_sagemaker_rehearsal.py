"""The training entry point under torchrun in a fake SageMaker container (sm_job/rehearse.py), on the CPU.

Two ranks with two DataLoader workers each, an empty build cache: the compiler must run once, both
ranks must train, the model and the traces must land where SageMaker picks them up. A rank that
fails, at a step or while another rank compiles, must fail the job with its error instead of hanging
it. The same script must also run as one plain process. The first test compiles the extension
(20-60 s on 2 cores); the others reuse its cache or stop before a build finishes.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="the entry point writes TensorBoard scalars (pip install tensorboard)")

from sm_job import rehearse  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# A hang bound, not a speed check: a job that does not end by then counts as hung.
HANG_S = 600


def report(r) -> str:
    tail = "\n".join(r.log.splitlines()[-60:])
    return (
        f"problems: {r.problems}\nfacts: {r.facts}\nrc={r.returncode} after {r.seconds:.0f} s\n--- output tail:\n{tail}"
    )


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory):
    """One cache for the module, empty when the first test starts."""
    return tmp_path_factory.mktemp("sm_job_cache") / "custom_op_cache"


@pytest.mark.slow
def test_two_ranks_build_once_train_and_leave_model_and_traces(tmp_path, build_cache):
    assert not build_cache.exists()
    r = rehearse.run(tmp_path / "job", nproc=2, workers=2, cache_dir=str(build_cache), timeout=HANG_S)
    assert r.ok, report(r)
    assert r.facts["builds"] == 1 and r.facts["ranks_that_compiled"] == 1, report(r)
    assert r.facts["ranks_that_loaded"] == 2, report(r)
    out = r.layout.output_data
    summary = json.loads((out / "summary.json").read_text())
    assert [s["rank"] for s in summary["ranks"]] == [0, 1]
    assert all(s["measured_steps"] == 6 - 1 - 2 for s in summary["ranks"])  # 1 warm-up, 1 + 1 profiled
    first_epoch = {}
    for rank in (0, 1):
        lines = [json.loads(x) for x in (out / f"rank{rank}" / "steps.jsonl").read_text().splitlines()]
        assert [x["step"] for x in lines] == list(range(6)) and all(x["samples"] == 4 for x in lines)
        first_epoch[rank] = {i for x in lines if x["epoch"] == 0 for i in x["files"]}
    # DistributedSampler: 32 files, 16 per rank and epoch, and the two ranks' shards do not overlap.
    assert len(first_epoch[0]) == len(first_epoch[1]) == 16
    assert not first_epoch[0] & first_epoch[1]

    import torch

    from profiling.model import build_model

    info = json.loads((r.layout.model / "model.json").read_text())
    net = build_model(info["model"], info["num_classes"])
    net.load_state_dict(torch.load(r.layout.model / "model.pt", map_location="cpu", weights_only=True))
    with torch.no_grad():
        assert net(torch.zeros(2, 3, 56, 56, dtype=torch.uint8)).shape == (2, info["num_classes"])


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["roi", "rrc"])
def test_same_script_runs_as_one_plain_process(tmp_path, build_cache, pipeline):
    """No torchrun, no SageMaker variables: rank 0 of 1, outputs under ./runs/sm_job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGEMAKER_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(CUSTOM_OP_CACHE_DIR=str(build_cache), CUSTOM_OP_FORCE_JIT="1")
    cmd = [
        sys.executable,
        str(ROOT / "sm_job" / "train.py"),
        "--num-images",
        "8",
        "--image-size",
        "80x96",
        "--crop-size",
        "48",
        "--output-size",
        "40",
        "--batch-size",
        "4",
        "--steps",
        "4",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--workers",
        "1",
        "--pipeline",
        pipeline,
        "--decode-ahead",
        "2",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rank 0/1" in proc.stdout and "backend none (single process)" in proc.stdout
    run_dir = tmp_path / "runs" / "sm_job"
    assert (run_dir / "model" / "model.pt").is_file()
    assert len((run_dir / "output" / "rank0" / "steps.jsonl").read_text().splitlines()) == 4


@pytest.mark.slow
def test_rank_failing_at_a_step_fails_the_job_with_its_error(tmp_path, build_cache):
    r = rehearse.run(
        tmp_path / "job", nproc=2, workers=2, cache_dir=str(build_cache), inject_failure="1:3", timeout=HANG_S
    )
    assert r.ok, report(r)
    assert r.returncode not in (0, None)
    assert "InjectedFailure: injected failure on rank 1 at step 3" in r.log
    assert not r.facts["model_written"]
    # Rank 1 stopped at step 3, before logging it; rank 0 got no further than step 3 either.
    for rank in (0, 1):
        lines = (r.layout.output_data / f"rank{rank}" / "steps.jsonl").read_text().splitlines()
        assert len(lines) <= 4


def _processes_mentioning(text: str) -> list:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid():
            found.append(f"{pid}: {cmdline[:200]}")
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="looks for leftover compilers in /proc (Linux)")
def test_rank_failing_while_another_compiles_fails_the_job_and_frees_the_lock(tmp_path):
    """Rank 1 raises 8 s after start-up, while rank 0 holds the build lock and compiles: torchrun ends
    rank 0's whole process group (its ninja and compilers too), and the lock is free for the next job."""
    from filelock import FileLock

    cache = tmp_path / "empty_cache"
    r = rehearse.run(
        tmp_path / "job", nproc=2, workers=2, cache_dir=str(cache), inject_failure="1:start:8", timeout=HANG_S
    )
    assert r.ok, report(r)
    assert "injected failure on rank 1 at start-up" in r.log
    locks = list((cache / "custom_op").glob("*.lock"))
    assert locks, "rank 0 never reached the build"
    for lock in locks:
        with FileLock(str(lock), timeout=0):  # raises Timeout if anyone still held it
            pass
    deadline = time.monotonic() + 30
    while _processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _processes_mentioning(str(tmp_path))
