"""The fused resized crop's arithmetic: which DCT scale, which scaled pixels to decode, how the window
maps onto the output, and the decode + resample call (custom_op.resized_crop and custom_op.transforms
use it; resized_crop.py's docstring explains the method).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, Optional, Union

import torch

from . import _outcomes
from ._args import DecodeOptions, as_int

#: The DCT scales (in eighths) the automatic choice picks from. Only 1/8, 2/8, 4/8 and 8/8 have SIMD
#: inverse DCTs in libjpeg-turbo; bench/bench_resized_crop.py compares this set with all of 1..8.
AUTO_SCALES: tuple[int, ...] = (1, 2, 4, 8)

#: Interpolation names and their resize_box filter codes. "nearest" is Pillow's NEAREST (the source
#: pixel under each output pixel's centre), not F.interpolate's legacy "nearest".
INTERPOLATIONS = {"nearest": 0, "bilinear": 1, "bicubic": 2, "box": 3, "hamming": 4, "lanczos": 5}
# Filter half-widths before widening by the downscale factor (Pillow's supports); nearest reads one pixel.
_SUPPORT = {0: 0.0, 1: 1.0, 2: 2.0, 3: 0.5, 4: 1.0, 5: 3.0}

Size = Union[int, Sequence[int]]


class Axis(NamedTuple):
    """One axis of a resize_box call: what to decode (scaled-image pixels) and how to map it."""

    first: int  # first decoded scaled pixel
    count: int  # decoded scaled pixels
    in0: float  # box start in the op's frame
    in1: float  # box end in the op's frame
    out_size: int  # virtual output size the box maps onto
    out_start: int  # first output pixel produced
    out_count: int  # output pixels produced
    origin: int  # frame position of the first decoded pixel


class Resample(NamedTuple):
    """How the decoded pixels are resampled: a resize_box filter code, and whether it is widened by
    the downscale factor."""

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


def crop_axis(start: int, length: int, s: int, out: int) -> Axis:
    """Crop-then-resize along one axis: the box [start, start + length) * s / 8 onto `out` pixels, in a
    frame whose 0 is the first decoded pixel (so at s = 8 the box is (0, length), as for a crop)."""
    first = start * s // 8
    last = -(-(start + length) * s // 8)  # ceil; never past ceil(N * s / 8) since start + length <= N
    return Axis(
        first, last - first, (start * s - 8 * first) / 8, ((start + length) * s - 8 * first) / 8, out, 0, out, 0
    )


def resize_crop_axis(image_size: int, s: int, resized: int, crop_start: int, crop: int, resample: Resample) -> Axis:
    """Resize-then-crop along one axis: the whole scaled image onto `resized` pixels, of which
    [crop_start, crop_start + crop) are produced, from only the scaled pixels their filter taps read."""
    scaled_size = -(-image_size * s // 8)
    in1 = image_size * s / 8
    step = in1 / resized
    support = _SUPPORT[resample.filter] * (max(step, 1.0) if resample.antialias else 1.0)
    lo_centre = (crop_start + 0.5) * step
    hi_centre = (crop_start + crop - 0.5) * step
    # The op rounds the tap range as Pillow does; one pixel more each side covers any rounding here.
    first = max(0, math.floor(lo_centre - support) - 1)
    last = min(scaled_size, math.ceil(hi_centre + support) + 2)
    return Axis(first, last - first, 0.0, in1, resized, crop_start, crop, first)


def decode_and_resample(
    tensor: torch.Tensor, rows: Axis, cols: Axis, s: int, resample: Resample, options: DecodeOptions, flip: bool = False
) -> torch.Tensor:
    """The decode at scale ``s`` and the resample; ``flip``: the result mirrored left-right, by the
    resampler itself (a separate flip would be another pass over the output, parallel in torch)."""
    window = (rows.first, cols.first, rows.count, cols.count)
    region, warnings = _outcomes.call(
        torch.ops.custom_op.decode_and_crop_jpeg, tensor, *window, scale_num=s, **options.op_kwargs()
    )
    if options.warns:
        _outcomes.warn_text(warnings, stacklevel=5)
    return _outcomes.call(
        torch.ops.custom_op.resize_box,
        region,
        box=[rows.in0, cols.in0, rows.in1, cols.in1],
        size=[rows.out_size, cols.out_size],
        out_window=[rows.out_start, cols.out_start, rows.out_count, cols.out_count],
        origin=[rows.origin, cols.origin],
        filter=resample.filter,
        antialias=resample.antialias,
        flip=flip,
    )


def check_window(top: int, left: int, height: int, width: int, image_h: int, image_w: int, exif: bool) -> None:
    if not (
        height > 0 and width > 0 and 0 <= top and 0 <= left and top + height <= image_h and left + width <= image_w
    ):
        frame = " (after EXIF orientation)" if exif else ""
        raise ValueError(
            f"custom_op: crop window (top={top}, left={left}, height={height}, width={width}) "
            f"does not fit in the image of height {image_h} and width {image_w}{frame}"
        )


def resized_crop(
    tensor: torch.Tensor,
    image_size: tuple[int, int],
    window: tuple[int, int, int, int],
    out: tuple[int, int],
    scale: Optional[int],
    resample: Resample,
    options: DecodeOptions,
    flip: bool = False,
) -> torch.Tensor:
    """The work of decode_and_resized_crop_jpeg once the arguments are checked and the header read
    (``image_size``: the image's height and width, in the frame the window is given in; ``flip``: the
    output mirrored left-right)."""
    top, left, height, width = window
    check_window(top, left, height, width, *image_size, options.apply_exif_orientation)
    s = scale if scale is not None else choose_scale(height, width, out)
    rows, cols = crop_axis(top, height, s, out[0]), crop_axis(left, width, s, out[1])
    return decode_and_resample(tensor, rows, cols, s, resample, options, flip)
