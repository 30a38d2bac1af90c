"""The training loop of the job: one rank's DataLoader, DDP model, step timing, and what it writes.

Each rank reads its own shard (DistributedSampler) with its own DataLoader workers and writes into
<output data dir>/rank<N>/: steps.jsonl (one line per step: loss, file indices, per-phase
seconds, worker-side ms per sample), summary.json (step-time statistics), TensorBoard scalars and
torch.profiler traces of the last steps. Rank 0 gathers the ranks' summaries into
<output data dir>/summary.json and saves the model (state_dict of the unwrapped model) into the
model dir. The step timing, traces, scalars,
statistics and the model are the profiling tool's (profiling/), the data set is datasets/'s.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from datasets import GPU_PIPELINES, JpegCropDataset, collate_encoded
from datasets.synthetic import make_synthetic_set
from profiling.model import build_model
from profiling.report import environment, run_stats
from profiling.scalars import ScalarLog
from profiling.step_timer import StepTimer
from profiling.trace import PROFILER_WARMUP_STEPS, make_profiler, trace_files
from profiling.train_loop import WORKER_STAGES, RunResult, decode_gpu_batch, train_step

from .distributed import Ranks

MODEL_FILE = "model.pt"
MODEL_INFO_FILE = "model.json"
SUMMARY_FILE = "summary.json"
STEP_LOG_FILE = "steps.jsonl"


class InjectedFailure(RuntimeError):
    """Raised on purpose (--inject-failure) to check that one failing rank fails the whole job."""


def decoded_ahead(batches, pipeline: str, output_size: int, device: torch.device, depth: int):
    """The epoch's batches decoded ahead on background threads (custom_op.decode_ahead), as the
    step-time tool's GPU pipelines do: the step then waits only where the decode is slower than it."""
    import custom_op

    decode = functools.partial(decode_gpu_batch, pipeline=pipeline, output_size=output_size, device=device)
    return custom_op.decode_ahead(batches, decode, depth=depth, device=device)


def rank_dir(output_data_dir: str, rank: int) -> str:
    return os.path.join(output_data_dir, f"rank{rank}")


def default_workers(num_cpus: int | None, ranks: Ranks) -> int:
    """The host's CPUs shared by its ranks, one left to each rank's main process; 1 to 8."""
    if not num_cpus:
        num_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, (num_cpus or 1) // ranks.local_world_size - 1))


def step_plan(steps: int, warmup: int, profile_steps: int) -> tuple[int, int]:
    """(measured steps, steps the profiler skips): the profiler's steps come last, out of the statistics."""
    profiled = PROFILER_WARMUP_STEPS + profile_steps if profile_steps > 0 else 0
    measured = steps - warmup - profiled
    if measured < 1:
        raise ValueError(
            f"--steps {steps} leaves no measured step after {warmup} warm-up and {profiled} "
            f"profiled steps: raise --steps or lower --warmup / --profile-steps"
        )
    return measured, warmup + measured


def resolve_data(args, train_dir: str | None, ranks: Ranks) -> str:
    """The channel or --data folder; without one, the synthetic set (generated once per host: every rank
    calls the generator, whose file lock lets one write while the others wait, then reuse it)."""
    if args.data:
        return args.data
    if train_dir:
        return train_dir
    h, w = args.image_size
    return str(make_synthetic_set(args.num_images, h, w, seed=args.seed, show_progress=ranks.local_rank == 0))


def train(
    args,
    *,
    data_dir: str,
    model_dir: str,
    output_data_dir: str,
    ranks: Ranks,
    device: torch.device,
    extension: dict,
    log: Callable[[str], None],
    command: str,
) -> dict:
    cuda = device.type == "cuda"
    measured_steps, profiler_skip = step_plan(args.steps, args.warmup, args.profile_steps)
    ds = JpegCropDataset(
        data_dir,
        args.pipeline,
        crop_size=args.crop_size,
        output_size=args.output_size,
        seed=args.seed,
        on_error=args.on_error,
    )
    # Every rank gets len(ds) // world_size samples (drop_last), a different shard each epoch.
    sampler = DistributedSampler(
        ds, num_replicas=ranks.world_size, rank=ranks.rank, shuffle=True, seed=args.seed, drop_last=True
    )
    batches_per_epoch = len(sampler) // args.batch_size
    if batches_per_epoch < 1:
        raise ValueError(
            f"{data_dir}: {len(ds)} files give {len(sampler)} per rank over {ranks.world_size} "
            f"ranks, fewer than one batch of {args.batch_size}: lower --batch-size"
        )
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        drop_last=True,
        pin_memory=cuda,
        collate_fn=collate_encoded if args.pipeline in GPU_PIPELINES else None,
    )

    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    num_classes = max(2, len(ds.classes))
    net = build_model(args.model, num_classes).to(device)
    net.train()
    model = DistributedDataParallel(net, device_ids=[device.index] if cuda else None) if ranks.distributed else net
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    out_dir = rank_dir(output_data_dir, ranks.rank)
    os.makedirs(out_dir, exist_ok=True)
    earlier_traces = set(trace_files(out_dir))
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()}
    scalars = ScalarLog(out_dir, {"rank": ranks.rank, **config})
    timer = StepTimer(device)
    result = RunResult(pipeline=args.pipeline, log_dir=out_dir, num_files=len(ds))
    skipped: dict[str, None] = {}
    failure = args.inject_failure
    epoch = 0
    started = time.perf_counter()
    step_log = open(os.path.join(out_dir, STEP_LOG_FILE), "w")
    batches = None
    try:
        with make_profiler(out_dir, skip_first=profiler_skip, active=args.profile_steps, cuda=cuda) as prof:
            for step in range(args.steps):
                timer.start_step()
                with timer.phase("data_wait"), record_function("data_wait"):
                    batch = next(batches, None) if batches is not None else None
                    if batch is None:  # start of an epoch: new shard order and new windows
                        if step > 0:
                            epoch += 1
                        sampler.set_epoch(epoch)
                        ds.epoch = epoch
                        batches = iter(loader)
                        if cuda and args.pipeline in GPU_PIPELINES and args.decode_ahead > 0:
                            batches = decoded_ahead(batches, args.pipeline, ds.output_size, device, args.decode_ahead)
                        batch = next(batches)
                if failure is not None and failure[:2] == (ranks.rank, step):
                    raise InjectedFailure(f"injected failure on rank {ranks.rank} at step {step} (--inject-failure)")
                loss, labels, info = train_step(batch, args.pipeline, ds, timer, model, loss_fn, optimizer, device)
                times = timer.end_step()
                n = len(labels)
                worker_ms = {k: float(info[k].sum()) * 1000.0 / n for k in WORKER_STAGES}
                for paths in info["skipped"]:
                    for p in filter(None, paths.split("\n")):
                        skipped.setdefault(p)
                loss_value = loss.item()
                measured = args.warmup <= step < args.warmup + measured_steps
                scalars.step(step, times, worker_ms, loss_value, measured=measured)
                step_log.write(
                    json.dumps(
                        {
                            "step": step,
                            "epoch": epoch,
                            "rank": ranks.rank,
                            "loss": loss_value,
                            "samples": n,
                            "files": info["index"].tolist(),
                            "measured": measured,
                            "seconds": times,
                            "worker_ms_per_sample": worker_ms,
                        }
                    )
                    + "\n"
                )
                step_log.flush()
                if measured:
                    for k, v in times.items():
                        result.steps.setdefault(k, []).append(v)
                    for k, v in worker_ms.items():
                        result.worker_ms.setdefault(k, []).append(v)
                    result.losses.append(loss_value)
                if step % args.log_every == 0 or step == args.steps - 1:
                    log(
                        f"step {step + 1}/{args.steps} epoch {epoch} loss {loss_value:.4f} "
                        f"step {times['total']:.3f}s data_wait {times['data_wait']:.3f}s"
                    )
                prof.step()
    finally:
        step_log.close()
        scalars.close()
        batches = None  # ends this rank's workers now, also after an error
    result.skipped_files = list(skipped)
    result.trace_files = [t for t in trace_files(out_dir) if t not in earlier_traces]
    for path in result.skipped_files:
        log(f"skipped corrupt file: {path}")

    summary = {
        "rank": ranks.rank,
        "local_rank": ranks.local_rank,
        "node_rank": ranks.node_rank,
        "host": os.environ.get("SM_CURRENT_HOST") or os.uname().nodename,
        "pid": os.getpid(),
        "device": str(device),
        "steps": args.steps,
        "epochs_started": epoch + 1,
        "samples_per_epoch": len(sampler),
        "files": len(ds),
        "data": data_dir,
        "seconds": time.perf_counter() - started,
        "final_loss": loss_value,
        "extension": extension,
        "log_dir": out_dir,
        "trace_files": result.trace_files,
        **run_stats(result, args.batch_size),
    }
    with open(os.path.join(out_dir, SUMMARY_FILE), "w") as f:
        json.dump(summary, f, indent=2)

    everyone = [summary]
    if ranks.distributed:
        everyone = [None] * ranks.world_size
        dist.all_gather_object(everyone, summary)
    if ranks.rank == 0:
        save_model(net, model_dir, args, num_classes, ds.classes)
        job_summary = {
            "command": command,
            "config": config,
            "world_size": ranks.world_size,
            "images_per_s_all_ranks": sum(s["images_per_s"] for s in everyone),
            "step_p50_s_slowest_rank": max(s["phases_s"]["total"]["p50"] for s in everyone),
            "environment": environment(),
            "ranks": everyone,
        }
        with open(os.path.join(output_data_dir, SUMMARY_FILE), "w") as f:
            json.dump(job_summary, f, indent=2)
    if ranks.distributed:
        dist.barrier()  # no rank leaves (and tears the group down) before rank 0 has written
    return summary


def save_model(net: torch.nn.Module, model_dir: str, args, num_classes: int, classes: list) -> None:
    os.makedirs(model_dir, exist_ok=True)
    torch.save(net.state_dict(), os.path.join(model_dir, MODEL_FILE))
    info = {
        "model": args.model,
        "num_classes": num_classes,
        "classes": list(classes),
        "input": f"uint8 BGR [B, 3, {args.output_size}, {args.output_size}] (the model normalizes)",
        "torch": torch.__version__,
        "state_dict": MODEL_FILE,
    }
    with open(os.path.join(model_dir, MODEL_INFO_FILE), "w") as f:
        json.dump(info, f, indent=2)
