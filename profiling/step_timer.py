"""Per-step timing of the phases of a training step: data wait, host-to-device copy, compute.

On the CPU every phase is a time.perf_counter interval. On CUDA the copy and compute phases are
timed with CUDA events (the host returns from those calls before the GPU is done); the step ends
with a synchronize on the last event, so the step total covers the GPU work too. Phases not timed
with events (data wait) are host intervals on both.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

# Phases whose work runs on the device, timed with CUDA events there.
DEVICE_PHASES = ("h2d", "gpu_decode", "gpu_transform", "compute")


class StepTimer:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._start = 0.0
        self._host: dict[str, float] = {}
        self._events: dict[str, tuple] = {}

    def start_step(self) -> None:
        self._start = time.perf_counter()
        self._host = {}
        self._events = {}

    @contextmanager
    def phase(self, name: str):
        if self.cuda and name in DEVICE_PHASES:
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            try:
                yield
            finally:
                end.record()
                self._events[name] = (begin, end)
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._host[name] = self._host.get(name, 0.0) + time.perf_counter() - t0

    def end_step(self) -> dict[str, float]:
        """Seconds per phase and "total" for the step (synchronizing with the GPU first)."""
        if self.cuda:
            torch.cuda.synchronize()
        times = dict(self._host)
        for name, (begin, end) in self._events.items():
            times[name] = begin.elapsed_time(end) / 1000.0
        times["total"] = time.perf_counter() - self._start
        return times
