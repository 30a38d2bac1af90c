"""custom_op.decode_ahead: results in order and equal to direct calls, up to `depth` batches decoding at
once and never more, the source read on the calling thread, exceptions at their batch's turn, the
threads gone once the iteration ends however it ends; on a GPU, each thread's own stream and the
results ordered on the caller's stream."""

from __future__ import annotations

import gc
import io
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
from custom_op import gpu

REASON = gpu.unavailable_reason()
needs_gpu = pytest.mark.skipif(REASON is not None, reason=f"GPU backend unavailable here: {REASON}")


def jpeg(seed: int, height: int = 48, width: int = 64) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def make_batches(count: int, size: int = 4):
    """count batches of `size` files with a 16x16 window each, all different."""
    return [
        ([jpeg(b * size + i) for i in range(size)], [i for i in range(size)], [2 * i for i in range(size)], 16, 16)
        for b in range(count)
    ]


def ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("custom_op_ahead")]


def threads_gone(timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while ahead_threads() and time.monotonic() < end:
        time.sleep(0.01)
    return not ahead_threads()


def decode_cpu(batch):
    return custom_op.decode_and_crop_jpegs(*batch, device="cpu")


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_results_in_order_and_equal_to_direct_calls(depth):
    batches = make_batches(7)
    results = list(custom_op.decode_ahead(batches, decode_cpu, depth=depth, device="cpu"))
    assert len(results) == len(batches)
    for got, batch in zip(results, batches):
        want = decode_cpu(batch)
        assert len(got) == len(want)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert threads_gone()


def test_depth_batches_decode_at_once():
    """Each decode waits for `depth` of them to be running: run one at a time, the barrier breaks."""
    depth = 3
    barrier = threading.Barrier(depth, timeout=5)

    def decode(batch):
        barrier.wait()
        return batch

    assert list(custom_op.decode_ahead(range(6), decode, depth=depth, device="cpu")) == list(range(6))


def test_depth_batches_decode_while_the_caller_works():
    """While the caller holds a result, the next `depth` batches are handed out and decoding."""
    depth = 3
    started = threading.Semaphore(0)

    def decode(batch):
        started.release()
        return batch

    for result in custom_op.decode_ahead(range(10), decode, depth=depth, device="cpu"):
        if result + depth < 10:
            for _ in range(1 if result else depth + 1):
                assert started.acquire(timeout=10)  # batch result + depth has started


def test_never_more_than_depth_at_once():
    depth, running, most = 2, [0], [0]
    lock = threading.Lock()

    def decode(batch):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return batch

    assert list(custom_op.decode_ahead(range(10), decode, depth=depth, device="cpu")) == list(range(10))
    assert 1 <= most[0] <= depth


def test_source_is_read_on_the_calling_thread_depth_ahead():
    readers, taken = set(), []

    def source():
        for k in range(5):
            readers.add(threading.current_thread())
            taken.append(k)
            yield k

    it = custom_op.decode_ahead(source(), lambda b: b * 10, depth=2, device="cpu")
    assert next(it) == 0
    assert taken == [0, 1, 2]  # `depth` batches handed out, then one more as the first result came
    assert list(it) == [10, 20, 30, 40]
    assert readers == {threading.current_thread()}


def test_three_batches_decode_ahead_by_default():
    taken = []

    def source():
        for k in range(6):
            taken.append(k)
            yield k

    it = custom_op.decode_ahead(source(), lambda b: b, device="cpu")
    assert next(it) == 0
    assert taken == [0, 1, 2, 3]  # three handed out, then one more as the first result came
    assert list(it) == [1, 2, 3, 4, 5]


def test_a_result_the_caller_drops_is_freed_at_once():
    """decode_ahead keeps no reference to a result it has handed over (a batch on the GPU would stay
    allocated until the next one was asked for)."""
    made = []

    class Result:
        pass

    def decode(batch):
        result = Result()
        made.append(weakref.ref(result))
        return result

    it = custom_op.decode_ahead(range(6), decode, depth=2, device="cpu")
    gc.disable()  # freed by reference counting, not by a later collection of a cycle
    try:
        result = next(it)
        assert made[0]() is result
        del result
        assert made[0]() is None
    finally:
        gc.enable()
        it.close()


def test_an_exception_comes_at_its_batch():
    def decode(batch):
        if batch == 3:
            raise ValueError("bad batch 3")
        return batch

    it = custom_op.decode_ahead(range(8), decode, depth=2, device="cpu")
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad batch 3"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert not ahead_threads()


def test_a_decode_error_of_the_operator_passes_through():
    batches = make_batches(3)
    bad = (batches[1][0][:1] + [torch.tensor([1, 2, 3], dtype=torch.uint8)], [0, 0], [0, 0], 16, 16)
    it = custom_op.decode_ahead([batches[0], bad, batches[2]], decode_cpu, depth=2, device="cpu")
    assert len(next(it)) == 4
    with pytest.raises(RuntimeError, match="batch item 1"):
        next(it)


def test_a_source_error_stops_the_threads():
    def source():
        yield 1
        yield 2
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(custom_op.decode_ahead(source(), lambda b: b, depth=2, device="cpu"))
    assert threads_gone()


def test_leaving_early_waits_for_the_batches_in_flight():
    started, finished = [], []

    def decode(batch):
        started.append(batch)
        time.sleep(0.05)
        finished.append(batch)
        return batch

    it = custom_op.decode_ahead(range(100), decode, depth=3, device="cpu")
    for result in it:
        if result == 1:
            break
    it.close()
    assert not ahead_threads()  # close() returned once they had ended
    assert sorted(started) == sorted(finished)  # none left running
    assert len(started) <= 1 + 1 + 3  # the two yielded, and at most `depth` more handed out


def test_an_iterator_dropped_unfinished_stops_its_threads():
    """An iteration neither finished nor closed (the loop's frame gone, the iterator garbage) waits for
    the batch running and stops the threads, as close() does."""
    finished = []

    def decode(batch):
        time.sleep(0.02)
        finished.append(batch)
        return batch

    it = custom_op.decode_ahead(range(100), decode, depth=3, device="cpu")
    assert next(it) == 0
    del it
    gc.collect()
    assert not ahead_threads()
    assert len(finished) <= 1 + 3


def test_exit_waits_for_the_batches_being_decoded(tmp_path):
    """An iteration still held when the interpreter exits: the batches its threads are decoding finish
    (they are daemon threads, which the interpreter would stop halfway through a decode call)."""
    done = tmp_path / "done.txt"
    script = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
import custom_op

def decode(batch):
    time.sleep(0.1 + 0.5 * batch)  # batch 1 is still decoding when the first result comes
    with open({str(done)!r}, "a") as f:
        f.write(f"{{batch}}\\n")
    return batch

it = custom_op.decode_ahead(range(10), decode, depth=2, device="cpu")
print(next(it))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    finished = done.read_text().split()
    assert "1" in finished and len(finished) <= 1 + 2  # the first result, and at most `depth` more


def test_an_empty_source_gives_nothing():
    assert list(custom_op.decode_ahead([], decode_cpu, device="cpu")) == []
    assert threads_gone()


def test_no_thread_before_the_first_result_is_asked_for():
    custom_op.decode_ahead(make_batches(2), decode_cpu, device="cpu")
    assert not ahead_threads()


@pytest.mark.parametrize("depth", [0, -1, 1.5, True, "2", None])
def test_depth_must_be_a_positive_int(depth):
    with pytest.raises(ValueError, match="depth"):
        custom_op.decode_ahead([], decode_cpu, depth=depth, device="cpu")


def test_decode_must_be_callable():
    with pytest.raises(TypeError, match="callable"):
        custom_op.decode_ahead([], "decode", device="cpu")


@pytest.mark.parametrize("device", ["meta", "mps", "tpu", None])
def test_device_must_be_cpu_or_cuda(device):
    with pytest.raises(ValueError, match="device"):
        custom_op.decode_ahead([], decode_cpu, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_says_so():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        custom_op.decode_ahead([], decode_cpu)


# ---------------------------------------------------------------------------------------------------
# On a GPU


@needs_gpu
@pytest.mark.parametrize("depth", [1, 3])
def test_gpu_results_equal_direct_calls_and_are_ready_on_the_callers_stream(depth):
    batches = make_batches(9, size=8)

    def decode(batch):
        return custom_op.decode_and_crop_jpegs(*batch, device="cuda", stack=True)

    sums = []
    for images in custom_op.decode_ahead(batches, decode, depth=depth):
        assert images.is_cuda and images.shape == (8, 3, 16, 16)
        sums.append(images.sum(dim=(1, 2, 3)))  # queued on the caller's stream right away
    for got, batch in zip(sums, batches):
        want = torch.stack(decode_cpu(batch)).sum(dim=(1, 2, 3))
        assert torch.equal(got.cpu(), want)
    assert threads_gone()


@needs_gpu
def test_gpu_each_thread_decodes_on_its_own_stream():
    caller = torch.cuda.current_stream()
    seen = {}
    lock = threading.Lock()

    def decode(batch):
        stream = torch.cuda.current_stream()
        with lock:
            seen.setdefault(threading.current_thread().name, set()).add(stream.cuda_stream)
        return custom_op.decode_and_crop_jpegs(*batch, device="cuda")

    for images in custom_op.decode_ahead(make_batches(8), decode, depth=2):
        assert all(img.is_cuda for img in images)
    streams = set().union(*seen.values())
    assert caller.cuda_stream not in streams
    assert all(len(s) == 1 for s in seen.values())  # one stream per thread, kept
    assert len(streams) == len(seen)


@needs_gpu
def test_gpu_decode_sees_the_callers_earlier_work():
    """A CUDA tensor the caller made just before handing the batch out is complete for decode."""
    big = torch.empty(1 << 24, device="cuda")

    def source():
        for k in range(4):
            torch.cuda._sleep(50_000_000)  # the caller's stream is busy for some milliseconds,
            big.fill_(float(k))  # then fills the tensor
            yield k

    def decode(k):
        return big[-1].item() == float(k)

    assert all(custom_op.decode_ahead(source(), decode, depth=1))
