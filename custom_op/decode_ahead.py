"""Decoding the next batches while the caller uses the current one: decode_ahead.

Why: a batched GPU decode call returns only once its decode kernels have run (it must know which items
go to the CPU path), so between one call and the next the GPU waits for the host and the host for the
GPU. A few calls in flight on threads of their own, each on a CUDA stream of its own, keep both busy,
and the caller's thread is free for its training step meanwhile. The operators release the GIL while
they decode.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional, Union

import torch

from . import _args


def decode_ahead(
    batches: Iterable,
    decode: Callable[[Any], Any],
    *,
    depth: int = 3,
    device: Union[str, torch.device] = "cuda",
) -> Iterator:
    """Yields ``decode(batch)`` for each of ``batches``, in order, with the next ``depth`` of them
    decoding on background threads meanwhile.

    Typical use, with a DataLoader whose workers deliver encoded files (packed by
    :func:`custom_op.pack_files` in its ``collate_fn``) and windows::

        def decode(batch):
            data, windows, labels = batch
            images = custom_op.decode_and_crop_jpegs(data, *windows.T.tolist(), device="cuda", stack=True)
            return images, labels.to("cuda", non_blocking=True)

        for images, labels in custom_op.decode_ahead(loader, decode):
            ...  # the next three batches decode meanwhile

    Args:
        batches: any iterable, read on the calling thread (as a DataLoader iterator must be): the
            first ``depth`` batches when the first result is asked for, then one more as each result
            is handed over.
        decode: called with one batch on a background thread; any function (a decode call, plus
            whatever else the batch needs). With ``device="cuda"`` it runs with a CUDA stream of its
            thread's own as the current stream, on ``device``, and that stream first waits for the work
            queued on the caller's current stream when the batch was taken (so CUDA tensors the caller
            made are ready for it).
        depth: how many batches decode while the caller works on a result (1 or more; each has a
            thread, and up to ``depth + 1`` batches' outputs are alive at once). On an H100, two ran
            1.3 to 1.6 times as many images per second as one call at a time, at batch 64 and at 256,
            with the files in ordinary or in pinned memory (``bench/results/gpu_h100.md``). The default
            is three: each call is a chain of kernels as long as their slowest thread's work, which
            leaves the GPU room for another call's; on an H200, three ran 1.10 (batch 256) and 1.21
            (batch 64) times as many images per second as two on files decoded in chunks (those
            without short restart segments), and 1.20 and 1.38 times on prepared files in pinned
            memory (``bench/results/gpu_h200.md``), while in a loop whose training step keeps the GPU busy
            a step took as long with three as with two. A
            ``decode`` that returns the windows stacked (``stack=True``) rather than as a list costs
            the loop's thread less (it walks the result for the CUDA tensors in it).
        device: ``"cuda"`` (or ``"cuda:N"``, an index): the results are ordered on the caller's current
            stream: before each one is yielded, that stream waits for the stream it was decoded on,
            and every tensor in it on that device (in nested tuples, lists and dicts) is recorded as
            used on that stream, so that its memory is not reused before the caller's work on it has
            run. ``"cpu"``: threads only, no streams (the CPU operators decode a batch on torch's
            intra-op threads).

    Returns:
        An iterator of the results. A ``decode`` that raises raises the same exception from the
        iterator when its batch's turn comes, and the iteration ends there. Leaving the loop
        early (``break``, or the iterator closed or garbage-collected) waits for the batches in flight
        and stops the threads.

    Raises:
        ValueError: ``depth`` is less than 1, or ``device`` is neither a CPU nor a CUDA device.
        TypeError: ``decode`` is not callable.
        RuntimeError: ``device`` is a CUDA device and CUDA is not available.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"custom_op: depth must be an int of at least 1, got {depth!r}")
    dev = _args.device(device)
    if not callable(decode):
        raise TypeError(f"custom_op: decode must be callable, got {type(decode).__name__}")
    index = None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"custom_op: decode_ahead(device={str(dev)!r}): CUDA is not available here")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
    return _ahead(iter(batches), decode, depth, index)


def _ahead(batches: Iterator, decode: Callable, depth: int, index: Optional[int]) -> Iterator:
    """decode_ahead's iterator; index: the CUDA device's, None on the CPU.

    Batch k goes to thread k % depth, so each thread has at most one batch at a time and its results
    come back in order through a queue of its own: a hand-over is a put and a get of C queues, not a
    future with its Python locks, and each thread enters its device and stream once, not per batch.
    Both cost the host time per batch that a decode call of a few microseconds per image notices."""
    workers = [_Worker(k, decode, index) for k in range(depth)]
    handed_out = received = 0
    end = object()
    try:
        for worker in workers:
            batch = next(batches, end)
            if batch is end:
                break
            worker.hand_out(batch)
            handed_out += 1
        while received < handed_out:
            worker = workers[received % depth]
            # (In a list that is emptied as the result is handed over: held in a variable of this
            # frame, a batch would stay allocated until the caller asked for the next one.)
            finished = [worker.result()]
            received += 1
            # The next batch goes out before this one is handed over, so that `depth` of them decode
            # while the caller works on this one. This worker is free, and batch handed_out is its turn.
            batch = next(batches, end)
            if batch is not end:
                worker.hand_out(batch)
                handed_out += 1
            del batch
            yield _handed_over(finished.pop(), index)
    finally:
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.join()


class _Worker:
    """One decoding thread (started with its first batch), with a CUDA stream of its own as the
    thread's current stream on the device, set once.

    The thread is a daemon, so that an iteration left unfinished does not keep the interpreter from
    exiting; at exit, _stop_workers_at_exit waits for the batch each thread is decoding, which the
    interpreter would otherwise stop halfway through a decode call."""

    _STOP = object()

    def __init__(self, number: int, decode: Callable, index: Optional[int]):
        self._decode = decode
        self._index = index
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"custom_op_ahead_{number}", daemon=True)
        _live_workers.add(self)

    def hand_out(self, batch) -> None:
        ready = None
        if self._index is not None:
            # What the caller queued so far (CUDA tensors it made for this batch) comes first.
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self._index))
        self._jobs.put((batch, ready))
        if self._thread.ident is None:
            self._thread.start()

    def result(self) -> tuple[Any, Optional[torch.cuda.Event]]:
        """The next batch's (result, event after its work), or its decode's exception raised."""
        ok, value, done = self._results.get()
        if not ok:
            raise value
        return value, done

    def stop(self) -> None:
        """Batches handed out and not started are dropped; the one running finishes (join)."""
        self._stopping = True
        self._jobs.put(self._STOP)

    def join(self) -> None:
        if self._thread.ident is not None:
            self._thread.join()

    def _run(self) -> None:
        stream = None
        while True:
            job = self._jobs.get()
            if job is self._STOP:
                return
            if self._stopping:
                continue
            batch, ready = job
            del job
            try:
                if self._index is not None:
                    if stream is None:
                        torch.cuda.set_device(self._index)
                        stream = torch.cuda.Stream(device=self._index)
                        torch.cuda.set_stream(stream)
                    stream.wait_event(ready)
                result = self._decode(batch)
                done = None
                if stream is not None:
                    done = torch.cuda.Event()
                    done.record(stream)
                self._results.put((True, result, done))
            except BaseException as error:  # noqa: BLE001 - raised on the caller's thread at its turn
                self._results.put((False, error, None))
            # Nothing of the batch stays referenced here while the thread waits for the next one.
            del batch, ready
            result = None


_live_workers: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _stop_workers_at_exit() -> None:
    """Runs before the interpreter stops its daemon threads: the batches being decoded finish, those
    handed out and not started are dropped, as when an iteration is left early."""
    workers = list(_live_workers)
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.join()


def _handed_over(outcome: tuple[Any, Optional[torch.cuda.Event]], index: Optional[int]) -> Any:
    """The result, ordered on the caller's current stream (CUDA), its tensors recorded as used there."""
    result, done = outcome
    if done is None:
        return result
    stream = torch.cuda.current_stream(index)
    stream.wait_event(done)
    seen = set()
    for tensor in _tensors(result):
        if tensor.get_device() == index:  # (-1 on the CPU; one call, where .is_cuda and .device build objects)
            # Once per allocation: a batch's windows are views of one (record_stream applies to the
            # whole allocation, and costs about a microsecond a call).
            storage = tensor.untyped_storage().data_ptr()
            if storage not in seen:
                seen.add(storage)
                tensor.record_stream(stream)
    return result


def _tensors(value) -> Iterator[torch.Tensor]:
    """The tensors in value and in its nested tuples, lists and dicts (torch's pytree walk costs several
    times as much on a list of a batch's windows)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                yield item
            elif isinstance(item, (list, tuple, dict)):
                yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
