"""One timed training run: a pipeline, a model, a number of steps; per-step timings out.

Steps run in this order: `warmup` steps (worker start-up, first allocations; not in the statistics),
`steps` measured steps, then the profiler's warm-up step and `profile_steps` traced steps (not in the
statistics either, so the profiler's overhead does not distort them). One sampler covers all steps, so
no epoch boundary (and no worker restart) falls inside the run.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch.profiler import record_function
from torch.utils.data import DataLoader, RandomSampler

from datasets import (
    GPU_PIPELINES,
    FileList,
    JpegCropDataset,
    collate_encoded,
    decode_batch,
    decode_resized_batch,
    decode_resized_windows,
    decode_windows,
    further_transforms_batch,
)

from .model import build_model
from .scalars import ScalarLog
from .step_timer import StepTimer
from .trace import PROFILER_WARMUP_STEPS, make_profiler, trace_files

WORKER_STAGES = ("read", "decode", "transform")


class Decoded(NamedTuple):
    """A GPU pipeline's batch decoded ahead of its step (custom_op.decode_ahead): the images and labels on
    the device, and the workers' info."""

    images: torch.Tensor
    labels: torch.Tensor
    info: dict


def decode_gpu_batch(batch, pipeline: str, output_size: int, device: torch.device):
    """A GPU pipeline's batch from its workers -> (images, labels) on `device`, info: the same decode and
    further transforms as in the step, for custom_op.decode_ahead's threads."""
    data, windows, masks, labels, info = batch
    decode = decode_resized_batch if pipeline == "gpu-rrc" else decode_batch
    images = decode(data, windows, masks, device=device, output_size=output_size)
    return Decoded(images, labels.to(device, non_blocking=True), info)


def train_step(
    batch,
    pipeline: str,
    dataset: JpegCropDataset,
    timer: StepTimer,
    model,
    loss_fn,
    optimizer,
    device: torch.device,
    *,
    amp: bool = False,
    channels_last: bool = False,
):
    """One step on a loaded batch, timed by phase: the GPU decode (gpu and gpu-rrc pipelines, unless the
    batch was decoded ahead: Decoded), the host-to-device copy and the compute (forward, backward,
    optimizer step; under bfloat16 autocast with `amp`, on a channels-last batch with `channels_last`).
    Returns (loss, labels, worker info)."""
    if isinstance(batch, Decoded):
        images, labels, info = batch
    elif pipeline in GPU_PIPELINES:
        data, windows, masks, labels, info = batch
        with timer.phase("gpu_decode"), record_function("gpu_decode"):
            if pipeline == "gpu-rrc":
                # Decoded straight to the output size; the further transforms then only mask and convert.
                images = list(decode_resized_windows(data, windows, device=device, output_size=dataset.output_size))
            else:
                images = decode_windows(data, windows, device=device)
        with timer.phase("gpu_transform"), record_function("gpu_transform"):
            images = further_transforms_batch(images, masks, dataset.output_size)
        with timer.phase("h2d"), record_function("h2d"):
            labels = labels.to(device, non_blocking=True)
    else:
        images, labels, info = batch
        with timer.phase("h2d"), record_function("h2d"):
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    with timer.phase("compute"), record_function("compute"):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # under DistributedDataParallel, the gradients are all-reduced here
        optimizer.step()
    return loss, labels, info


@dataclass
class RunConfig:
    data: str
    layout: str = "auto"
    batch_size: int = 32
    workers: int = 2
    steps: int = 40
    warmup: int = 5
    profile_steps: int = 3
    device: str = "cpu"
    seed: int = 0
    model: str = "small_cnn"
    on_error: str = "raise"
    lr: float = 0.01
    amp: bool = False  # bfloat16 autocast in the forward pass
    # GPU pipelines: batches decoded ahead on background threads (custom_op.decode_ahead's depth); 0:
    # each batch decoded in its step.
    decode_ahead: int = 2
    channels_last: bool = False  # the model and its input batches in channels-last memory format


@dataclass
class RunResult:
    pipeline: str
    # Per measured step, seconds: "data_wait", "h2d", "compute", "total" (and "gpu_decode" and
    # "gpu_transform" for gpu).
    steps: dict[str, list[float]] = field(default_factory=dict)
    # Per measured step, worker-side milliseconds per sample for each stage of WORKER_STAGES.
    worker_ms: dict[str, list[float]] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    trace_files: list[str] = field(default_factory=list)
    log_dir: str = ""
    num_files: int = 0


def _append(store: dict[str, list[float]], values: dict[str, float]) -> None:
    for k, v in values.items():
        store.setdefault(k, []).append(v)


def run_pipeline(pipeline: str, cfg: RunConfig, log_dir: str, files: FileList | None = None) -> RunResult:
    """Train `pipeline` on cfg.data read in cfg.layout; `files`, when given, is that folder's listing
    (list_jpegs), so that every pipeline reads the files the caller reported."""
    device = torch.device(cfg.device)
    cuda = device.type == "cuda"
    ds = JpegCropDataset(cfg.data, pipeline, seed=cfg.seed, on_error=cfg.on_error, layout=cfg.layout, files=files)
    profile_steps = cfg.profile_steps
    total_steps = cfg.warmup + cfg.steps + (PROFILER_WARMUP_STEPS + profile_steps if profile_steps > 0 else 0)
    # The same seed gives every pipeline the same sample order, hence the same windows.
    sampler = RandomSampler(
        ds,
        replacement=False,
        num_samples=total_steps * cfg.batch_size,
        generator=torch.Generator().manual_seed(cfg.seed),
    )
    loader = DataLoader(
        ds,
        batch_size=cfg.batch_size,
        sampler=sampler,
        num_workers=cfg.workers,
        drop_last=True,
        pin_memory=cuda,
        collate_fn=collate_encoded if pipeline in GPU_PIPELINES else None,
    )

    torch.manual_seed(cfg.seed)
    num_classes = max(2, len(ds.classes))  # a flat folder has one class; keep the head a real classifier
    model = build_model(cfg.model, num_classes).to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    os.makedirs(log_dir, exist_ok=True)
    earlier_traces = set(trace_files(log_dir))  # a reused --logdir keeps older runs' traces
    result = RunResult(pipeline=pipeline, log_dir=log_dir, num_files=len(ds))
    scalars = ScalarLog(log_dir, {"pipeline": pipeline, **vars(cfg)})
    timer = StepTimer(device)
    skipped: dict[str, None] = {}
    batches = None
    try:
        with make_profiler(log_dir, skip_first=cfg.warmup + cfg.steps, active=profile_steps, cuda=cuda) as prof:
            batches = iter(loader)
            if pipeline in GPU_PIPELINES and cfg.decode_ahead > 0:
                import custom_op

                # The decode and transforms of the next batches run while this step trains: the step
                # then waits for data only where they take longer than it.
                decode = functools.partial(
                    decode_gpu_batch, pipeline=pipeline, output_size=ds.output_size, device=device
                )
                batches = custom_op.decode_ahead(batches, decode, depth=cfg.decode_ahead, device=device)
            for step in range(total_steps):
                timer.start_step()
                with timer.phase("data_wait"), record_function("data_wait"):
                    batch = next(batches)
                loss, labels, info = train_step(
                    batch,
                    pipeline,
                    ds,
                    timer,
                    model,
                    loss_fn,
                    optimizer,
                    device,
                    amp=cfg.amp,
                    channels_last=cfg.channels_last,
                )
                times = timer.end_step()
                n = len(labels)
                worker_ms = {k: float(info[k].sum()) * 1000.0 / n for k in WORKER_STAGES}
                for paths in info["skipped"]:
                    for p in filter(None, paths.split("\n")):
                        skipped.setdefault(p)
                loss_value = loss.item()
                measured = cfg.warmup <= step < cfg.warmup + cfg.steps
                scalars.step(step, times, worker_ms, loss_value, measured=measured)
                if measured:
                    _append(result.steps, times)
                    _append(result.worker_ms, worker_ms)
                    result.losses.append(loss_value)
                prof.step()
    finally:
        scalars.close()
        # Dropping the iterator ends its workers now (not at some later garbage collection), also
        # after an error.
        batches = None
    result.skipped_files = list(skipped)
    result.trace_files = [t for t in trace_files(log_dir) if t not in earlier_traces]
    return result
