"""One batch on one device: the operator call, on the CPU or on a CUDA device and stream.

The public functions (decode.py, batch.py) convert their arguments first (_args.py) and turn the
per-item statuses into results afterwards (_outcomes.py); this module only picks and calls the
operator. The CUDA library is loaded here on the first call with a CUDA device, never at import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import NamedTuple, Optional

import torch

from . import gpu

#: The path code of an item decoded on the CPU (the CUDA operator's codes are in gpu.PATH_NAMES).
CPU_PATH = 4


class BatchRun(NamedTuple):
    images: list[torch.Tensor]  # one per item, or one [N, C, H, W] tensor with stack=True
    statuses: list[int]  # _outcomes.OK, WARNED, VALUE_ERROR, ...
    messages: list[str]
    paths: list[int]  # which decoder took each item


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
    mode: int,
    exif: bool,
    on_warning: int,
    max_pixels: int,
    stack: bool,
    dev: torch.device,
    stream=None,
    check_entropy: bool = False,
) -> BatchRun:
    """Decodes ``tensors`` (whole images when ``windows`` is None, else (tops, lefts, heights, widths)).
    ``check_entropy`` reaches the CUDA operator only: the CPU path needs no check."""
    whole = windows is None
    tops, lefts, heights, widths = ([], [], [], []) if whole else windows
    if dev.type == "cpu":
        images, statuses, messages = torch.ops.custom_op.decode_jpegs(
            tensors, tops, lefts, heights, widths, whole, mode, exif, on_warning, max_pixels, stack
        )
        return BatchRun(images, statuses, messages, [CPU_PATH] * len(tensors))
    index = cuda_index(dev)
    if stream is not None and stream.device.index != index:
        raise ValueError(f"stream is on {stream.device}, the output device is cuda:{index}")
    # No stream context without a stream: the current one is the default, and torch.compile cannot
    # trace torch.cuda.stream(None).
    with torch.cuda.device(index), torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        args = (tensors, tops, lefts, heights, widths, whole, mode, exif, on_warning, max_pixels, stack, index)
        images, statuses, messages, paths = torch.ops.custom_op.decode_jpegs_cuda(*args, check_entropy)
    return BatchRun(images, statuses, messages, paths)
