"""Decoding the next batches while the caller uses the current one: decode_ahead.

Why: a batched GPU decode call returns only once its decode kernels have run (it must know which items
go to the CPU path), so between one call and the next the GPU waits for the host and the host for the
GPU. A few calls in flight on threads of their own, each on a CUDA stream of its own, keep both busy,
and the caller's thread is free for its training step meanwhile. The operators release the GIL while
they decode.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional, Union

import torch

from . import _args


def decode_ahead(
    batches: Iterable,
    decode: Callable[[Any], Any],
    *,
    depth: int = 2,
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

        for images, labels in custom_op.decode_ahead(loader, decode, depth=2):
            ...  # the next two batches decode meanwhile

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
            1.2 to 1.4 times as many images per second as one call at a time, at batch 64 and at 256,
            with the files in ordinary or in pinned memory (``bench/results/gpu_h100.md``); a
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
    """decode_ahead's iterator; index: the CUDA device's, None on the CPU."""
    cuda = index is not None
    local = threading.local()

    def run(batch, ready: Optional[torch.cuda.Event]):
        if not cuda:
            return decode(batch), None
        if getattr(local, "stream", None) is None:
            local.stream = torch.cuda.Stream(device=index)
        stream = local.stream
        with torch.cuda.device(index), torch.cuda.stream(stream):
            stream.wait_event(ready)
            result = decode(batch)
            done = torch.cuda.Event()
            done.record(stream)
        return result, done

    def submit(pool, batch):
        ready = None
        if cuda:
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(index))
        return pool.submit(run, batch, ready)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=depth, thread_name_prefix="custom_op_ahead")
    pending: collections.deque = collections.deque()
    end = object()
    try:
        for _ in range(depth):
            batch = next(batches, end)
            if batch is end:
                break
            pending.append(submit(pool, batch))
        while pending:
            # (In a list that is emptied as the result is handed over: held in a variable of this
            # frame, a batch would stay allocated until the caller asked for the next one.)
            finished = [pending.popleft().result()]
            # The next batch goes out before this one is handed over, so that `depth` of them decode
            # while the caller works on this one.
            batch = next(batches, end)
            if batch is not end:
                pending.append(submit(pool, batch))
            yield _handed_over(finished.pop(), index)
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)


def _handed_over(outcome: tuple[Any, Optional[torch.cuda.Event]], index: Optional[int]) -> Any:
    """The result, ordered on the caller's current stream (CUDA), its tensors recorded as used there."""
    result, done = outcome
    if done is None:
        return result
    stream = torch.cuda.current_stream(index)
    stream.wait_event(done)
    seen = set()
    for tensor in _tensors(result):
        if tensor.is_cuda and tensor.device.index == index:
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
