"""torch.profiler traces of a few training steps, written with tensorboard_trace_handler.

The profiler runs on a schedule after the measured steps (skip_first = warm-up + measured steps, then
one profiler warm-up step and `active` recorded steps), so its overhead never enters the step-time
statistics. The handler writes <dir>/<worker>.<timestamp>.pt.trace.json: Chrome-trace JSON that
Perfetto (ui.perfetto.dev) opens, and that TensorBoard's profiler plugin lists as a run.

DataLoader workers are separate processes the profiler does not see; with workers the dataset's
"read"/"decode"/"transform" ranges appear only when samples load in the main process (--workers 0),
and the worker-side timings that travel with each sample fill the gap.

Kineto, torch.profiler's C++ collector, writes a "USDT: ... profiler_start" / "profiler_stop" line
(and, at lower log levels, "STAGE: ... Completed Stage" lines) straight to file descriptor 2 each time
a trace starts and stops: tracepoint markers for system tools, not messages for the user, and they land
in the middle of the tool's progress output. While the profiler changes state, stderr goes to a
temporary file; those marker lines are dropped and everything else (kineto's warnings and errors
included) is written to stderr as it came.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

PROFILER_WARMUP_STEPS = 1

# Kineto's log prefix: LEVEL:YYYY-MM-DD HH:MM:SS PID:TID FILE:LINE]
_KINETO_MARKER = re.compile(rb"^(USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [^\s\]]+:\d+\] ")


def make_profiler(trace_dir: str, *, skip_first: int, active: int, cuda: bool):
    """A profiler context for the loop (call .step() after each step), or a no-op when active == 0."""
    if active <= 0:
        return contextlib.nullcontext(_NoProfiler())
    os.makedirs(trace_dir, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return _WithoutKinetoMarkers(
        profile(
            activities=activities,
            schedule=schedule(skip_first=skip_first, wait=0, warmup=PROFILER_WARMUP_STEPS, active=active, repeat=1),
            on_trace_ready=tensorboard_trace_handler(trace_dir),
            record_shapes=True,
            profile_memory=False,
            with_stack=False,
        )
    )


def trace_files(trace_dir: str) -> list[str]:
    if not os.path.isdir(trace_dir):
        return []
    return sorted(os.path.join(trace_dir, f) for f in os.listdir(trace_dir) if f.endswith(".pt.trace.json"))


class _NoProfiler:
    def step(self) -> None:
        pass


class _WithoutKinetoMarkers:
    """A torch.profiler.profile whose start, steps and stop run with kineto's marker lines filtered out."""

    def __init__(self, prof: profile):
        self._prof = prof

    def __enter__(self):
        with without_kineto_markers():
            self._prof.__enter__()
        return self

    def __exit__(self, *exc_info):
        with without_kineto_markers():
            return self._prof.__exit__(*exc_info)

    def step(self) -> None:
        with without_kineto_markers():
            self._prof.step()

    def __getattr__(self, name):
        return getattr(self._prof, name)


@contextlib.contextmanager
def without_kineto_markers():
    """Run the body with file descriptor 2 captured; pass on all but kineto's USDT/STAGE lines."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to protect
        yield
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = b"".join(
                line for line in captured.read().splitlines(keepends=True) if not _KINETO_MARKER.match(line)
            )
            while kept:
                kept = kept[os.write(2, kept) :]
