"""decode_and_resized_crop_jpeg: decode a JPEG window at a reduced DCT scale, straight to the training size.

RandomResizedCrop-style training resizes a window that is usually much larger than the output. libjpeg
can run its inverse DCT at scale s/8 (s = 1..16), producing an image ceil(H * s / 8) x ceil(W * s / 8)
at a fraction of the IDCT, upsampling and colour-conversion work. The window is mapped exactly into
that scaled frame and resized from there, with the fractional edges the mapping gives.

How a call works:
1. The scale: the smallest s in ``AUTO_SCALES`` with ``height * s / 8 >= size_h`` and
   ``width * s / 8 >= size_w`` (no upsampling of the scaled window, so no detail the full-resolution
   resize would keep is lost to the DCT scaling beyond its own filter); s = 8 when none is (the window is
   smaller than ``size``). ``scale=`` forces one.
2. The mapping: the full-resolution window [top, top + height) becomes the continuous box
   [top * s / 8, (top + height) * s / 8) of the scaled image (each scaled pixel i covers full-resolution
   pixels [8 i / s, 8 (i + 1) / s)), and likewise for columns. The rows and columns that box touches,
   floor(top * s / 8) to ceil((top + height) * s / 8), are decoded (custom_op.decode_and_crop_jpeg with
   scale_num=s).
3. The resize: the box, fractional offsets included, is resampled to ``size`` by
   torch.ops.custom_op.resize_box: Pillow's resize arithmetic (separable filter, support widened by the
   downscale factor when antialiasing; fixed point with 22 fractional bits, each pass rounded half up and
   clamped to 0..255; Pillow's pass order). Sample centres are box_start + (i + 0.5) * box_size / size:
   the box is not shifted by half a pixel. Taps are clamped to the decoded pixels, as a crop followed by
   a resize clamps them to the crop.

At s = 8 the box is the integer window itself, and the result equals a full decode, a crop and
Pillow's ``Image.resize(size, filter)`` of the crop, pixel for pixel: what torchvision's
``RandomResizedCrop`` does to a PIL image. At s < 8 it differs from that by the DCT-domain downscale
(libjpeg's reduced IDCT, then chroma upsampling and colour conversion at the reduced size) and by the
clamping of filter taps to the partially covered edge pixels; the README gives the PSNR per scale.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import torch

from . import _ops
from .decode import (
    _ON_WARNING,
    DEFAULT_MAX_PIXELS,
    Data,
    ImageReadMode,
    _as_int,
    _as_tensor,
    _check_cpu,
    _mode_code,
    _pixel_limit,
    _warn_about,
    _warning_code,
    read_jpeg_header,
)

__all__ = ["AUTO_SCALES", "INTERPOLATIONS", "choose_scale", "decode_and_resized_crop_jpeg"]

_ops.register_resize_fake_kernel()

#: The DCT scales (in eighths) the automatic choice picks from. Only 1/8, 2/8, 4/8 and 8/8 have SIMD
#: inverse DCTs in libjpeg-turbo; bench/bench_resized_crop.py compares this set with all of 1..8.
AUTO_SCALES: Tuple[int, ...] = (1, 2, 4, 8)

#: Interpolation names and their resize_box filter codes. "nearest" is Pillow's NEAREST (the source
#: pixel under each output pixel's centre), not F.interpolate's legacy "nearest".
INTERPOLATIONS = {"nearest": 0, "bilinear": 1, "bicubic": 2, "box": 3, "hamming": 4, "lanczos": 5}
# Filter half-widths before widening by the downscale factor (Pillow's supports); nearest reads one pixel.
_SUPPORT = {0: 0.0, 1: 1.0, 2: 2.0, 3: 0.5, 4: 1.0, 5: 3.0}

Size = Union[int, Sequence[int]]


class _Axis(NamedTuple):
    """One axis of a resize_box call: what to decode (scaled-image pixels) and how to map it."""

    first: int  # first decoded scaled pixel
    count: int  # decoded scaled pixels
    in0: float  # box start in the op's frame
    in1: float  # box end in the op's frame
    out_size: int  # virtual output size the box maps onto
    out_start: int  # first output pixel produced
    out_count: int  # output pixels produced
    origin: int  # frame position of the first decoded pixel


def _filter_code(interpolation) -> int:
    # torchvision's InterpolationMode is a str Enum: take its value.
    name = getattr(interpolation, "value", interpolation)
    if isinstance(name, str) and name.lower() in INTERPOLATIONS:
        return INTERPOLATIONS[name.lower()]
    raise ValueError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")


def _output_size(size: Size) -> Tuple[int, int]:
    """(h, w) from an int or a sequence of one or two ints, as torchvision accepts them."""
    if isinstance(size, Sequence) and not isinstance(size, (str, bytes)):
        if len(size) not in (1, 2):
            raise ValueError(f"size must be an int or a sequence of 1 or 2 ints, got {size!r}")
        values = [_as_int("size", v) for v in size]
        h, w = values if len(values) == 2 else (values[0], values[0])
    else:
        h = w = _as_int("size", size)
    if not (1 <= h <= 1 << 24 and 1 <= w <= 1 << 24):
        raise ValueError(f"size must be positive (and at most 2^24), got {size!r}")
    return h, w


def _check_scale(scale) -> Optional[int]:
    if scale is None:
        return None
    value = _as_int("scale", scale)
    if not 1 <= value <= 16:
        raise ValueError(f"scale must be an integer number of eighths in 1..16 (8 = full resolution), got {scale}")
    return value


def choose_scale(height: int, width: int, size: Size, scales: Sequence[int] = AUTO_SCALES) -> int:
    """The smallest s in ``scales`` (eighths) that keeps a height x width window at least ``size``
    (an int or (h, w)) once scaled by s / 8; 8 when none does."""
    out_h, out_w = _output_size(size)
    for s in sorted(scales):
        if height * s >= 8 * out_h and width * s >= 8 * out_w:
            return s
    return 8


def _crop_axis(start: int, length: int, s: int, out: int) -> _Axis:
    """Crop-then-resize along one axis: the box [start, start + length) * s / 8 onto `out` pixels, in a
    frame whose 0 is the first decoded pixel (so at s = 8 the box is (0, length), as for a crop)."""
    first = start * s // 8
    last = -(-(start + length) * s // 8)  # ceil; never past ceil(N * s / 8) since start + length <= N
    return _Axis(first, last - first, (start * s - 8 * first) / 8, ((start + length) * s - 8 * first) / 8,
                 out, 0, out, 0)


def _resize_crop_axis(image_size: int, s: int, resized: int, crop_start: int, crop: int, code: int,
                      antialias: bool) -> _Axis:
    """Resize-then-crop along one axis: the whole scaled image onto `resized` pixels, of which
    [crop_start, crop_start + crop) are produced, from only the scaled pixels their filter taps read."""
    scaled_size = -(-image_size * s // 8)
    in1 = image_size * s / 8
    step = in1 / resized
    support = _SUPPORT[code] * (max(step, 1.0) if antialias else 1.0)
    lo_centre = (crop_start + 0.5) * step
    hi_centre = (crop_start + crop - 0.5) * step
    # The op rounds the tap range as Pillow does; one pixel more each side covers any rounding here.
    first = max(0, math.floor(lo_centre - support) - 1)
    last = min(scaled_size, math.ceil(hi_centre + support) + 2)
    return _Axis(first, last - first, 0.0, in1, resized, crop_start, crop, first)


def _decode_and_resample(tensor: torch.Tensor, rows: _Axis, cols: _Axis, s: int, code: int, antialias: bool,
                         mode: int, exif: bool, on_warning: int, max_pixels: int) -> torch.Tensor:
    window = (rows.first, cols.first, rows.count, cols.count)
    if on_warning == _ON_WARNING["warn"]:
        region = _warn_about(torch.ops.custom_op.decode_and_crop_jpeg_with_warnings(
            tensor, *window, mode, exif, max_pixels, s))
    else:
        region = torch.ops.custom_op.decode_and_crop_jpeg(tensor, *window, mode, exif, on_warning, max_pixels, s)
    return torch.ops.custom_op.resize_box(
        region, [rows.in0, cols.in0, rows.in1, cols.in1], [rows.out_size, cols.out_size],
        [rows.out_start, cols.out_start, rows.out_count, cols.out_count], [rows.origin, cols.origin], code,
        antialias)


def _check_window(top: int, left: int, height: int, width: int, image_h: int, image_w: int, exif: bool) -> None:
    if not (height > 0 and width > 0 and 0 <= top and 0 <= left and top + height <= image_h
            and left + width <= image_w):
        frame = " (after EXIF orientation)" if exif else ""
        raise ValueError(f"custom_op: crop window (top={top}, left={left}, height={height}, width={width}) "
                         f"does not fit in the image of height {image_h} and width {image_w}{frame}")


def _resized_crop(tensor: torch.Tensor, image_h: int, image_w: int, window: Tuple[int, int, int, int],
                  out: Tuple[int, int], scale: Optional[int], code: int, antialias: bool, mode: int, exif: bool,
                  on_warning: int, max_pixels: int) -> torch.Tensor:
    """The work of decode_and_resized_crop_jpeg once the arguments are checked and the header read."""
    top, left, height, width = window
    _check_window(top, left, height, width, image_h, image_w, exif)
    s = scale if scale is not None else choose_scale(height, width, out)
    return _decode_and_resample(tensor, _crop_axis(top, height, s, out[0]), _crop_axis(left, width, s, out[1]),
                                s, code, antialias, mode, exif, on_warning, max_pixels)


def decode_and_resized_crop_jpeg(data: Data, top: int, left: int, height: int, width: int, size: Size, *,
                                 interpolation: str = "bilinear", antialias: bool = True,
                                 mode: ImageReadMode = ImageReadMode.RGB, apply_exif_orientation: bool = False,
                                 on_warning: str = "raise", max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
                                 device: Union[str, torch.device] = "cpu",
                                 scale: Optional[int] = None) -> torch.Tensor:
    """Decodes the window ``[top:top+height, left:left+width]`` of a JPEG resized to ``size``.

    What torchvision's ``resized_crop`` does to a fully decoded image, but the window is decoded alone and
    at the smallest DCT scale that keeps it at least ``size`` (see the module docstring for how the scale
    is chosen and the window mapped).

    Args:
        data, mode, apply_exif_orientation, on_warning, max_pixels: as for
            :func:`custom_op.decode_and_crop_jpeg`.
        top, left, height, width: the window, in full-resolution pixels (in the displayed frame when
            ``apply_exif_orientation``). It must lie inside the image.
        size: output size, an int (square) or ``(h, w)``.
        interpolation: ``"bilinear"`` (default), ``"bicubic"``, ``"nearest"``, ``"box"``, ``"hamming"``
            or ``"lanczos"`` (Pillow's filters), or a torchvision ``InterpolationMode`` of those names.
        antialias: widen the filter by the downscale factor (default; Pillow always does). False
            samples with the filter at its own size, like F.interpolate(antialias=False); no effect on
            nearest.
        scale: force the DCT scale, in eighths (1..16; 8 = full resolution: then the result equals full
            decode + crop + Pillow's resize exactly). Default: :func:`choose_scale`.
        device: ``"cpu"``, or ``"cuda"`` where custom_op's GPU backend can run: the decode and resize
            still run on the CPU (there is no GPU resized crop yet) and the result is copied to the GPU.

    Returns:
        A contiguous uint8 tensor ``[C, h, w]``.

    Raises:
        TypeError: bad ``data`` (as decode_and_crop_jpeg) or a non-integer window/size/scale.
        ValueError: the window does not fit in the image, a bad size, scale, interpolation or option.
        RuntimeError: the data is not a JPEG libjpeg-turbo can decode.
    """
    kind = _check_cpu(device)
    tensor = _as_tensor(data)
    window = (_as_int("top", top), _as_int("left", left), _as_int("height", height), _as_int("width", width))
    out = _output_size(size)
    code = _filter_code(interpolation)
    forced = _check_scale(scale)
    options = (_mode_code(mode), bool(apply_exif_orientation), _warning_code(on_warning), _pixel_limit(max_pixels))
    info = read_jpeg_header(tensor, apply_exif_orientation=bool(apply_exif_orientation))
    image = _resized_crop(tensor, info.height, info.width, window, out, forced, code, bool(antialias), *options)
    return image if kind == "cpu" else image.to(device)
