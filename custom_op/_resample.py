"""The fused resized crop's options as its operator (``decode_and_resized_crop_jpegs``, csrc/ops.cpp)
takes them, and the call of one image: custom_op.resized_crop and custom_op.transforms build their calls
here. What the operator computes is in resized_crop.py's docstring; the per-item plan (scale, decoded
pixels, box) is csrc/common/resized_crop_plan.h, the one definition of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Optional, Union

import torch

from . import _device, _outcomes
from ._args import MODE_CHANNELS, DecodeOptions, as_int, per_image

#: The DCT scales (in eighths) the automatic choice picks from. Only 1/8, 2/8, 4/8 and 8/8 have SIMD
#: inverse DCTs in libjpeg-turbo; bench/bench_resized_crop.py compares this set with all of 1..8.
AUTO_SCALES: tuple[int, ...] = (1, 2, 4, 8)

#: Interpolation names and their filter codes. "nearest" is Pillow's NEAREST (the source pixel under
#: each output pixel's centre), not F.interpolate's legacy "nearest".
INTERPOLATIONS = {"nearest": 0, "bilinear": 1, "bicubic": 2, "box": 3, "hamming": 4, "lanczos": 5}

#: Output dtypes and their codes (csrc/jpeg_core/normalize.h, OutputDtype; tests/test_ops.py checks
#: them against the library's).
OUTPUT_DTYPES = {torch.uint8: 0, torch.float32: 1, torch.float16: 2, torch.bfloat16: 3}

Size = Union[int, Sequence[int]]


class Resample(NamedTuple):
    """How the decoded pixels are resampled: a filter code, and whether it is widened by the downscale
    factor."""

    filter: int
    antialias: bool


def resampling(interpolation, antialias) -> Resample:
    return Resample(filter_code(interpolation), bool(antialias))


def filter_code(interpolation) -> int:
    # torchvision's InterpolationMode is a str Enum: take its value.
    name = getattr(interpolation, "value", interpolation)
    if isinstance(name, str) and name.lower() in INTERPOLATIONS:
        return INTERPOLATIONS[name.lower()]
    raise ValueError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")


def output_size(size: Size) -> tuple[int, int]:
    """(h, w) from an int or a sequence of one or two ints, as torchvision accepts them."""
    if isinstance(size, Sequence) and not isinstance(size, (str, bytes)):
        if len(size) not in (1, 2):
            raise ValueError(f"size must be an int or a sequence of 1 or 2 ints, got {size!r}")
        values = [as_int("size", v) for v in size]
        h, w = values if len(values) == 2 else (values[0], values[0])
    else:
        h = w = as_int("size", size)
    if not (1 <= h <= 1 << 24 and 1 <= w <= 1 << 24):
        raise ValueError(f"size must be positive (and at most 2^24), got {size!r}")
    return h, w


def check_scale(scale) -> Optional[int]:
    if scale is None:
        return None
    value = as_int("scale", scale)
    if not 1 <= value <= 16:
        raise ValueError(f"scale must be an integer number of eighths in 1..16 (8 = full resolution), got {scale}")
    return value


def choose_scale(height: int, width: int, size: Size, scales: Sequence[int] = AUTO_SCALES) -> int:
    """The smallest s in ``scales`` (eighths) that keeps a height x width window at least ``size``
    (an int or (h, w)) once scaled by s / 8; 8 when none does."""
    out_h, out_w = output_size(size)
    for s in sorted(scales):
        if height * s >= 8 * out_h and width * s >= 8 * out_w:
            return s
    return 8


def dtype_code(dtype) -> int:
    try:
        return OUTPUT_DTYPES[dtype]
    except (KeyError, TypeError):
        names = ", ".join(str(d) for d in OUTPUT_DTYPES)
        raise TypeError(f"dtype must be one of {names}, got {dtype!r}") from None


def _floats(name: str, values) -> list[float]:
    values = per_image(values)
    if not isinstance(values, (list, tuple)):
        values = [values]
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or a sequence of numbers, got {values!r}") from None


def normalization(mean, std, mode: int) -> tuple[list[float], list[float]]:
    """mean and std as the operator takes them (None: an empty list), one value given for a mode with a
    fixed channel count standing for every channel, as torchvision's Normalize broadcasts it. The
    operator checks the rest (lengths, values, a uint8 dtype) before any decode."""
    mean = [] if mean is None else _floats("mean", mean)
    std = [] if std is None else _floats("std", std)
    channels = MODE_CHANNELS.get(mode)
    if channels is not None:
        mean = mean * channels if len(mean) == 1 else mean
        std = std * channels if len(std) == 1 else std
    return mean, std


def op_options(
    size: tuple[int, int],
    resize_shorter: int,
    scale: Optional[int],
    resample: Resample,
    dtype: torch.dtype,
    mean: list[float],
    std: list[float],
    options: DecodeOptions,
) -> dict:
    """The operator's keyword arguments but ``flips``, from checked values (``dtype``: checked here):
    built once per transform."""
    return dict(
        size=list(size),
        resize_shorter=resize_shorter,
        scale=scale or 0,
        filter=resample.filter,
        antialias=resample.antialias,
        mean=mean,
        std=std,
        dtype=dtype_code(dtype),
        **options.op_kwargs(),
    )


def check_options(kwargs: dict) -> None:
    """Raises what a call with these options raises before any decode (a bad mean, std, dtype, ...): the
    operator on an empty batch checks every argument as any call does. Not for mode UNCHANGED, whose
    empty batch is an error of its own."""
    _outcomes.call(torch.ops.custom_op.decode_and_resized_crop_jpegs, [], [], [], [], [], flips=[], **kwargs)


def one_image(tensor: torch.Tensor, window: Sequence[int], flip: bool, kwargs: dict) -> torch.Tensor:
    """One image's resized crop on the CPU, on the calling thread (a batch of one opens no parallel
    region): the window (top, left, height, width), or () for resize then centre crop. Raises the
    item's exception; emits its warnings (stacklevel: the caller of the public function calling this)."""
    top, left, height, width = ([v] for v in window) if window else ([], [], [], [])
    images, statuses, messages = _outcomes.call(
        torch.ops.custom_op.decode_and_resized_crop_jpegs,
        [tensor],
        top,
        left,
        height,
        width,
        flips=[1] if flip else [],
        **kwargs,
    )
    if statuses[0]:
        error = _outcomes.settle(statuses, messages, single=True, stacklevel=5)[0]
        if error is not None:
            raise error
    return images[0]


def run_batch(tensors, windows, flips, kwargs, placement, on_error: str, stacklevel: int = 5):
    """What a batched resized crop returns (decode_and_resized_crop_jpegs, the transforms' ``batch``):
    the stacked tensor, with ``on_error="return"`` also the items' exceptions. ``stacklevel``: the
    user's frame for warnings, counted from warnings.warn (5: the caller of the public function that
    calls this)."""
    run = _device.run_resized_crop(tensors, windows, flips, kwargs, placement)
    errors = _outcomes.settle(run.statuses, run.messages, stacklevel=stacklevel)
    if on_error == "raise":
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return run.images
    return run.images, errors
