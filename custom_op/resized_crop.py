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
clamping of filter taps to the partially covered edge pixels; the fused resized crop guide gives the PSNR
per scale.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from . import _args, _device, _resample
from ._args import DEFAULT_MAX_PIXELS, Data, ImageReadMode
from ._resample import AUTO_SCALES, INTERPOLATIONS, Size, choose_scale
from .decode import read_jpeg_header

__all__ = ["AUTO_SCALES", "INTERPOLATIONS", "choose_scale", "decode_and_resized_crop_jpeg"]


def decode_and_resized_crop_jpeg(
    data: Data,
    top: int,
    left: int,
    height: int,
    width: int,
    size: Size,
    *,
    interpolation: str = "bilinear",
    antialias: bool = True,
    mode: ImageReadMode = ImageReadMode.RGB,
    apply_exif_orientation: bool = False,
    on_warning: str = "raise",
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
    device: Union[str, torch.device] = "cpu",
    scale: Optional[int] = None,
) -> torch.Tensor:
    """Decodes the window ``[top:top+height, left:left+width]`` of a JPEG resized to ``size``.

    What torchvision's ``resized_crop`` does to a fully decoded image, but the window is decoded alone and
    at the smallest DCT scale that keeps it at least ``size`` (the fused resized crop guide says how the
    scale is chosen and the window mapped).

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
            decode + crop + Pillow's resize exactly). Default: :func:`custom_op.resized_crop.choose_scale`.
        device: ``"cpu"``, or ``"cuda"`` where custom_op's GPU backend can run: the decode and resize
            still run on the CPU (there is no GPU resized crop yet) and the result is copied to the GPU.

    Returns:
        A contiguous uint8 tensor ``[C, h, w]``.

    Raises:
        TypeError: bad ``data`` (as decode_and_crop_jpeg) or a non-integer window/size/scale.
        ValueError: the window does not fit in the image, a bad size, scale, interpolation or option.
        RuntimeError: the data is not a JPEG libjpeg-turbo can decode.
    """
    dev = _args.device(device)
    if dev.type == "cuda":
        _device.cuda_index(dev)  # says why the GPU backend cannot run here, before any work
    tensor = _args.as_tensor(data)
    window = _args.window(top, left, height, width)
    out = _resample.output_size(size)
    resample = _resample.resampling(interpolation, antialias)
    forced = _resample.check_scale(scale)
    options = _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels)
    info = read_jpeg_header(tensor, apply_exif_orientation=options.apply_exif_orientation)
    image = _resample.resized_crop(tensor, (info.height, info.width), window, out, forced, resample, options)
    return image if dev.type == "cpu" else image.to(dev)
