"""bench/bench_gpu_host_time.py's split of the process's CPU time by thread, on threads of this test's
own (the benchmark itself needs a GPU): the calling thread, threads named as our helper threads and the
CUDA driver's are, and the others, each counted where it belongs."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_gpu_host_time as host_time  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")


def spin(seconds: float) -> None:
    """Burns about `seconds` of the calling thread's own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Spinner(threading.Thread):
    """A thread that names itself (as custom_op's C++ threads do, through /proc), then burns
    `seconds` of CPU once `go` is set, and stays alive until `release` is set."""

    def __init__(self, name: str, seconds: float, go: threading.Event, release: threading.Event):
        super().__init__()
        self.comm, self.seconds, self.go, self.release = name, seconds, go, release
        self.named, self.spun = threading.Event(), threading.Event()

    def run(self):
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(self.comm)
        self.named.set()
        self.go.wait()
        spin(self.seconds)
        self.spun.set()
        self.release.wait()


def test_cpu_time_is_split_by_thread():
    go, release = threading.Event(), threading.Event()
    spinners = [
        Spinner("custom_op_host", 0.3, go, release),
        Spinner("custom_op_host", 0.1, go, release),
        Spinner("cuda-EvtHandlr", 0.2, go, release),
        Spinner("pt_autograd_0", 0.15, go, release),
    ]
    try:
        for s in spinners:
            s.start()
            s.named.wait()
        caller = threading.get_native_id()
        before = host_time.thread_times()
        go.set()
        spin(0.1)
        for s in spinners:
            s.spun.wait()
        spent = host_time.cpu_by_group(before, host_time.thread_times(), caller)
    finally:
        go.set()
        release.set()
        for s in spinners:
            s.join()
    assert set(spent) == set(host_time.THREAD_GROUPS)
    assert 0.09 <= spent["calling thread"] < 0.3, spent
    assert 0.39 <= spent["helper threads"] < 0.6, spent
    assert 0.19 <= spent["CUDA driver threads"] < 0.4, spent
    assert 0.14 <= spent["other threads"] < 0.4, spent
