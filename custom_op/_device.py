"""One batch on one device: the operator call, on the CPU or on a CUDA device and stream.

The public functions (decode.py, batch.py, resized_crop.py) convert their arguments first (_args.py, and
:func:`placement` here) and turn the per-item statuses into results afterwards (_outcomes.py); this
module only picks and calls the operator. The CUDA library is loaded here on the first call with a
CUDA device, never at import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import NamedTuple, Optional

import torch

from . import _args, _outcomes, gpu

#: The path code of an item decoded on the CPU (the CUDA operator's codes are in gpu.PATH_NAMES).
CPU_PATH = 4


class BatchRun(NamedTuple):
    images: list[torch.Tensor]  # one per item, or one [N, C, H, W] tensor with stack=True
    statuses: list[int]  # _outcomes.OK, WARNED, VALUE_ERROR, ...
    messages: list[str]
    paths: list[int]  # which decoder took each item


class Placement(NamedTuple):
    """Where a call decodes: the public ``device``, ``stream``, ``check_entropy`` and ``gpu_decoder``
    options, checked."""

    device: torch.device
    stream: Optional[torch.cuda.Stream]
    check_entropy: bool  # reaches the CUDA operator only: the CPU path needs no check
    decoder: int  # gpu_decoder's code (_args.GPU_DECODERS); reaches the CUDA operator only


_CPU = Placement(torch.device("cpu"), None, False, 0)


def placement(device, stream, check_entropy, gpu_decoder="auto") -> Placement:
    # The defaults, as every call on the CPU passes them: no device object to build.
    if (
        type(device) is str
        and device == "cpu"
        and stream is None
        and check_entropy is False
        and type(gpu_decoder) is str
        and gpu_decoder == "auto"
    ):
        return _CPU
    dev = _args.device(device)
    _args.stream_check(dev, stream)
    return Placement(dev, stream, _args.flag("check_entropy", check_entropy), _args.gpu_decoder(gpu_decoder))


def cuda_index(dev: torch.device) -> int:
    """The CUDA device index a call on ``dev`` runs on, loading the GPU library first; raises
    RuntimeError saying why when the GPU backend cannot run here."""
    reason = gpu.unavailable_reason()
    if reason is not None:
        raise RuntimeError(
            f"custom_op: device='cuda': the GPU (nvJPEG) backend cannot run here ({reason}); "
            "decode on the CPU (device='cpu') and move the tensor with .to('cuda')"
        )
    return dev.index if dev.index is not None else torch.cuda.current_device()


def run(
    tensors: list[torch.Tensor],
    windows: Optional[Sequence[list[int]]],
    options: _args.DecodeOptions,
    where: Placement,
    *,
    stack: bool,
) -> BatchRun:
    """Decodes ``tensors`` (whole images when ``windows`` is None, else (tops, lefts, heights, widths))."""
    whole = windows is None
    args = (tensors, *(([], [], [], []) if whole else windows))
    kwargs = dict(whole=whole, stack=stack, **options.op_kwargs())
    return _call(torch.ops.custom_op.decode_jpegs, torch.ops.custom_op.decode_jpegs_cuda, where, args, kwargs)


def run_resized_crop(
    tensors: list[torch.Tensor], windows: Sequence[list[int]], flips: list[int], kwargs: dict, where: Placement
) -> BatchRun:
    """The fused resized crop of a batch: ``windows`` (tops, lefts, heights, widths), empty lists for
    resize then centre crop; ``kwargs`` the operator's other options (_resample.op_options). The result's
    ``images`` is the one [N, C, h, w] tensor.

    On a CUDA device it runs the GPU library's ``decode_and_resized_crop_jpegs_cuda``, ordered on
    ``stream``."""
    ops = torch.ops.custom_op
    return _call(
        ops.decode_and_resized_crop_jpegs,
        ops.decode_and_resized_crop_jpegs_cuda,
        where,
        (tensors, *windows),
        dict(flips=flips, **kwargs),
    )


def _call(cpu_op, cuda_op, where: Placement, args: tuple, kwargs: dict) -> BatchRun:
    """A batched operator on ``where``: ``cpu_op``, or ``cuda_op`` (which also takes the device index,
    check_entropy and the decoder choice, and returns each item's path) on its CUDA device and stream.
    ``args[0]``: the files."""
    if where.device.type == "cpu":
        images, statuses, messages = _outcomes.call(cpu_op, *args, **kwargs)
        return BatchRun(images, statuses, messages, [CPU_PATH] * len(args[0]))
    index = cuda_index(where.device)
    stream = where.stream
    if stream is not None and stream.device.index != index:
        raise ValueError(f"stream is on {stream.device}, the output device is cuda:{index}")
    # No stream context without a stream: the current one is the default, and torch.compile cannot
    # trace torch.cuda.stream(None).
    with torch.cuda.device(index), torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        images, statuses, messages, paths = _outcomes.call(
            cuda_op, *args, device=index, check_entropy=where.check_entropy, decoder=where.decoder, **kwargs
        )
    return BatchRun(images, statuses, messages, paths)
