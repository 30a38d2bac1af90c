"""torch.profiler traces of a few training steps, written with tensorboard_trace_handler.

The profiler runs on a schedule after the measured steps (skip_first = warm-up + measured steps, then
one profiler warm-up step and `active` recorded steps), so its overhead never enters the step-time
statistics. The handler writes <dir>/<worker>.<timestamp>.pt.trace.json: Chrome-trace JSON that
Perfetto (ui.perfetto.dev) opens, and that TensorBoard's profiler plugin lists as a run.

DataLoader workers are separate processes the profiler does not see; with workers the dataset's
"read"/"decode"/"transform" ranges appear only when samples load in the main process (--workers 0),
and the worker-side timings that travel with each sample fill the gap.
"""

from __future__ import annotations

import contextlib
import os

from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

PROFILER_WARMUP_STEPS = 1


def make_profiler(trace_dir: str, *, skip_first: int, active: int, cuda: bool):
    """A profiler context for the loop (call .step() after each step), or a no-op when active == 0."""
    if active <= 0:
        return contextlib.nullcontext(_NoProfiler())
    os.makedirs(trace_dir, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(
        activities=activities,
        schedule=schedule(skip_first=skip_first, wait=0, warmup=PROFILER_WARMUP_STEPS, active=active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(trace_dir),
        record_shapes=True,
        profile_memory=False,
        with_stack=False,
    )


def trace_files(trace_dir: str) -> list[str]:
    if not os.path.isdir(trace_dir):
        return []
    return sorted(os.path.join(trace_dir, f) for f in os.listdir(trace_dir) if f.endswith(".pt.trace.json"))


class _NoProfiler:
    def step(self) -> None:
        pass
