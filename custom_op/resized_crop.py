"""decode_and_resized_crop_jpeg(s): decode a JPEG window at a reduced DCT scale, straight to the training
size; one image, or a batch in one call (in parallel on the CPU) into one [N, C, h, w] tensor, optionally
normalised and in a float dtype.

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
   floor(top * s / 8) to ceil((top + height) * s / 8), are decoded (what custom_op.decode_and_crop_jpeg
   gives with scale_num=s).
3. The resize: the box, fractional offsets included, is resampled to ``size`` with the arithmetic of
   torch.ops.custom_op.resize_box: Pillow's resize arithmetic (separable filter, support widened by the
   downscale factor when antialiasing; fixed point with 22 fractional bits, each pass rounded half up and
   clamped to 0..255; Pillow's pass order). Sample centres are box_start + (i + 0.5) * box_size / size:
   the box is not shifted by half a pixel. Taps are clamped to the decoded pixels, as a crop followed by
   a resize clamps them to the crop.
4. The output: uint8, or in a float dtype ``x / 255`` and, with ``mean`` and ``std``, ``(x / 255 - mean)
   / std``, computed in float32 and rounded to the dtype as torch rounds (torchvision's ``ToTensor`` then
   ``Normalize``, bit for bit).

Steps 1 to 3 are one C++ plan (csrc/common/resized_crop_plan.h) that every call, single or batched, CPU
or GPU, runs per item.

At s = 8 the box is the integer window itself, and the result equals a full decode, a crop and
Pillow's ``Image.resize(size, filter)`` of the crop, pixel for pixel: what torchvision's
``RandomResizedCrop`` does to a PIL image. At s < 8 it differs from that by the DCT-domain downscale
(libjpeg's reduced IDCT, then chroma upsampling and colour conversion at the reduced size) and by the
clamping of filter taps to the partially covered edge pixels; the fused resized crop guide gives the PSNR
per scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

import torch

from . import _args, _device, _outcomes, _resample
from ._args import DEFAULT_MAX_PIXELS, Data, ImageReadMode
from ._resample import AUTO_SCALES, INTERPOLATIONS, Size
from .packed_files import PackedFiles

__all__ = [
    "AUTO_SCALES",
    "INTERPOLATIONS",
    "choose_scale",
    "decode_and_resized_crop_jpeg",
    "decode_and_resized_crop_jpegs",
]

IntOrInts = Union[int, Sequence[int], torch.Tensor]


def choose_scale(height: int, width: int, size: Size, scales: Sequence[int] = AUTO_SCALES) -> int:
    """The DCT scale (in eighths) the resized crop picks for a window when ``scale`` is not given.

    The smallest ``s`` in ``scales`` with ``height * s / 8 >= size_h`` and ``width * s / 8 >= size_w``
    (the scaled window is never upsampled), else 8 (a window smaller than ``size`` is upsampled from
    full resolution). With the default ``scales``, :data:`AUTO_SCALES`, this is the operators' own
    choice; other sets are for comparing scales (bench/bench_resized_crop.py). For the resize-then-crop
    of :class:`custom_op.ResizeCenterCropJpeg` the "window" is the whole image and ``size`` the resized
    size.

    Args:
        height, width: the window's size in full-resolution pixels.
        size: the output size, an int (square) or ``(h, w)``.
        scales: the candidate scales, in eighths.
    """
    return _resample.choose_scale(height, width, size, scales)


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
    gpu_decoder: str = "auto",
) -> torch.Tensor:
    """Decodes the window ``[top:top+height, left:left+width]`` of a JPEG resized to ``size``.

    What torchvision's ``resized_crop`` does to a fully decoded image, but the window is decoded alone and
    at the smallest DCT scale that keeps it at least ``size`` (the fused resized crop guide says how the
    scale is chosen and the window mapped). It runs on the calling thread.

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
        device, gpu_decoder: ``"cpu"``, or ``"cuda"`` where custom_op's GPU backend can run: as
            :func:`decode_and_resized_crop_jpegs` with ``device="cuda"``.

    Returns:
        A contiguous uint8 tensor ``[C, h, w]``.

    Raises:
        TypeError: bad ``data`` (as decode_and_crop_jpeg) or a non-integer window/size/scale.
        ValueError: the window does not fit in the image, a bad size, scale, interpolation or option.
        RuntimeError: the data is not a JPEG libjpeg-turbo can decode.
    """
    placement = _device.placement(device, None, False, gpu_decoder)
    tensor = _args.as_tensor(data)
    window = _args.window(top, left, height, width)
    kwargs = _resample.op_options(
        _resample.output_size(size),
        0,
        _resample.check_scale(scale),
        _resample.resampling(interpolation, antialias),
        torch.uint8,
        [],
        [],
        _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels),
    )
    if placement.device.type == "cpu":
        return _resample.one_image(tensor, window, False, kwargs)
    run = _device.run_resized_crop([tensor], [[v] for v in window], [], kwargs, placement)
    error = _outcomes.settle(run.statuses, run.messages, single=True, stacklevel=4)[0]
    if error is not None:
        raise error
    return run.images[0]


def decode_and_resized_crop_jpegs(
    data: Sequence,
    tops: IntOrInts,
    lefts: IntOrInts,
    heights: IntOrInts,
    widths: IntOrInts,
    size: Size,
    *,
    flips=None,
    interpolation: str = "bilinear",
    antialias: bool = True,
    scale: Optional[int] = None,
    mean: Optional[Sequence[float]] = None,
    std: Optional[Sequence[float]] = None,
    dtype: torch.dtype = torch.uint8,
    mode: ImageReadMode = ImageReadMode.RGB,
    apply_exif_orientation: bool = False,
    on_warning: str = "raise",
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
    device: Union[str, torch.device] = "cpu",
    stream: Optional[torch.cuda.Stream] = None,
    on_error: str = "raise",
    gpu_decoder: str = "auto",
):
    """Decodes one window of each JPEG in ``data`` resized to ``size``, into one ``[N, C, h, w]`` tensor:
    the batched :func:`decode_and_resized_crop_jpeg`, with the flip, dtype conversion and normalisation
    of a training pipeline in the same pass.

    Item ``i`` of the result is ``decode_and_resized_crop_jpeg(data[i], tops[i], lefts[i], heights[i],
    widths[i], size, ...)``, mirrored left-right when ``flips[i]``, then converted as ``dtype``,
    ``mean`` and ``std`` say, pixel for pixel.

    Args:
        data: a list or tuple of encoded files, each as :func:`custom_op.decode_and_crop_jpeg` takes
            one, or a :class:`custom_op.PackedFiles`.
        tops, lefts, heights, widths: the windows, in full-resolution pixels (in the displayed frame
            when ``apply_exif_orientation``): one int for every file, or one per file (a list, tuple,
            1-D tensor or array). Each must lie inside its image (else that item's ValueError).
        size: the output size of every item, an int (square) or ``(h, w)``.
        flips: None (default: no flip), or one bool (or 0/1) per file, or one for all: True mirrors that
            item's output left-right (``RandomHorizontalFlip``), at no extra cost.
        interpolation, antialias, scale: as :func:`decode_and_resized_crop_jpeg`, for every item
            (``scale=None``: each item's own :func:`custom_op.resized_crop.choose_scale`).
        mean, std: None (default: no normalisation), or torchvision ``Normalize``'s values, in the units
            of float images in [0, 1] (e.g. ImageNet's ``(0.485, 0.456, 0.406)`` and ``(0.229, 0.224,
            0.225)``): one per output channel, or one for all channels. Given together, with a float
            ``dtype``; std must be non-zero.
        dtype: ``torch.uint8`` (default: the resized pixels), or ``torch.float32``, ``torch.float16`` or
            ``torch.bfloat16``: ``x / 255`` (``ToTensor``), then ``(that - mean) / std`` with ``mean``
            and ``std``, in float32, then rounded to the dtype to nearest even: equal to torchvision's
            ``ToTensor`` and ``Normalize`` on the uint8 result followed by ``.to(dtype)``.
        mode, apply_exif_orientation, on_warning, max_pixels: as :func:`custom_op.decode_and_crop_jpeg`,
            for every item. With ``mode=UNCHANGED`` every decoded item must have the same channel count
            (else ValueError), and an empty ``data`` raises ValueError (the channel count is unknown).
        device: ``"cpu"`` (default): the items run in parallel on torch's intra-op thread pool
            (``torch.set_num_threads`` sets its size; one item per task), the GIL released.
            ``"cuda"`` / ``"cuda:N"``: the result is on that device, with the CPU call's pixels. Files our
            CUDA decoder takes (every baseline Huffman-coded file it takes under the default
            ``gpu_decoder``; only prepared ones with ``"nvjpeg"``) are decoded there at the chosen DCT
            scale and resampled, flipped and normalised by the GPU, in a fixed number of launches; the
            automatic scale of a file nvJPEG decodes is 8 (full resolution), so its pixels equal the CPU
            call with ``scale=8``. On the GPU ``scale`` must be
            None, 1, 2, 4 or 8; ``mode=UNCHANGED`` runs on the CPU and is copied.
        gpu_decoder: as :func:`custom_op.decode_and_crop_jpeg`. With ``"auto"`` (default) or ``"cuda"``,
            every baseline file our CUDA decoder takes, prepared or not, is decoded there at the chosen
            scale (so the pixels are the CPU call's); with ``"nvjpeg"``, every file at scale 8 by nvJPEG.
        stream: device="cuda" only: the CUDA stream the output is ordered on (default: the current one).
        on_error: ``"raise"`` (default): a bad item raises its exception (the first by index), the
            message starting ``custom_op: batch item <index>:``. ``"return"``: returns ``(tensor,
            errors)``, where a bad item's slot is zeros and ``errors[i]`` is its exception (None for
            good items).

    Returns:
        A contiguous tensor ``[N, C, h, w]`` of ``dtype`` on ``device`` (with ``on_error="return"``:
        ``(tensor, errors)``).

    Raises:
        TypeError: ``data`` is not a list or tuple of bytes-like files or a PackedFiles, an argument
            has the wrong type, an unsupported ``dtype``, or ``mean``/``std`` with ``dtype=torch.uint8``;
            with ``on_error="raise"``, also a bad item's TypeError.
        ValueError: the window lists or ``flips`` do not have one entry per file, a window size below 1,
            a bad size, scale, interpolation or option, ``mean`` and ``std`` not one per channel or a
            zero or non-finite one; with ``on_error="raise"``, also a bad item's ValueError (a window
            outside its image, over max_pixels, ...). All of these but the items' are raised before
            any file is decoded.
        RuntimeError: with ``on_error="raise"``, an item that cannot be decoded; device="cuda" where
            the GPU backend cannot run.
    """
    placement = _device.placement(device, stream, False, gpu_decoder)
    if isinstance(data, PackedFiles):
        tensors = list(data.unpack())
    else:
        # The CUDA operator checks each file itself (a bad one is that item's TypeError, as on the CPU).
        tensors = _args.tensors(
            data, check_tensors=placement.device.type != "cuda", caller="decode_and_resized_crop_jpegs"
        )
    n = len(tensors)
    windows = [_args.int_list(name, v, n) for name, v in zip(_WINDOW, (tops, lefts, heights, widths))]
    if n and min(min(windows[2]), min(windows[3])) < 1:  # (min in C: the loop only to name the item)
        for i, (h, w) in enumerate(zip(windows[2], windows[3])):
            if h < 1 or w < 1:
                _args.size_check(h, w, where=f"batch item {i}: ")
    flip_list = [] if flips is None else _args.int_list("flips", flips, n)
    options = _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels)
    mean_list, std_list = _resample.normalization(mean, std, options.mode)
    kwargs = _resample.op_options(
        _resample.output_size(size),
        0,
        _resample.check_scale(scale),
        _resample.resampling(interpolation, antialias),
        dtype,
        mean_list,
        std_list,
        options,
    )
    return _resample.run_batch(tensors, windows, flip_list, kwargs, placement, _args.on_error_check(on_error))


_WINDOW = ("tops", "lefts", "heights", "widths")
