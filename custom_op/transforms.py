"""Training and evaluation transforms that go from a JPEG's bytes to the network's input size in one call.

Both decode just the window they need at a reduced DCT scale (the fused resized crop of
custom_op.decode_and_resized_crop_jpeg), so they fit in ``Dataset.__getitem__`` in place of "decode the
file, then torchvision's transform". Each can also return the float, normalised tensor the network takes
(``dtype``, ``mean``, ``std``: ``ToTensor`` and ``Normalize`` in the same pass), and transform a whole
batch in one call (``batch``: the items in parallel on torch's intra-op thread pool, into one
``[N, C, h, w]`` tensor), for a DataLoader whose collate function gets the files' bytes.

- :class:`RandomResizedCropJpeg`: torchvision's ``RandomResizedCrop`` (same window distribution, same
  RNG calls in the same order), with an optional horizontal flip.
- :class:`ResizeCenterCropJpeg`: the usual evaluation transform, ``Resize(resize_size)`` then
  ``CenterCrop(crop_size)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional, Union

import torch

from . import _args, _device, _outcomes, _resample
from ._args import DEFAULT_MAX_PIXELS, Data, ImageReadMode, as_int
from ._resample import check_scale, output_size
from .decode import read_jpeg_header

__all__ = ["RandomResizedCropJpeg", "ResizeCenterCropJpeg"]

GeneratorLike = Union[torch.Generator, int, None]


def _generator(generator: GeneratorLike) -> Optional[torch.Generator]:
    """None (torch's global generator, as torchvision uses), a Generator, or a seed for a new one."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool):
        raise TypeError("generator must be a torch.Generator, an int seed or None, got a bool")
    return torch.Generator().manual_seed(as_int("generator seed", generator))


def _range(name: str, value: Sequence[float]) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a pair of numbers (min, max), got {value!r}") from None
    if not (0 < low <= high and math.isfinite(high)):
        raise ValueError(f"{name} must be (min, max) with 0 < min <= max, got {value!r}")
    return low, high


class _JpegTransform:
    """Options shared by both transforms: decoding mode, filter, the DCT scale policy and the output's
    dtype and normalisation."""

    def __init__(
        self,
        interpolation,
        antialias,
        mode,
        apply_exif_orientation,
        on_warning,
        max_pixels,
        decode_scale,
        dtype,
        mean,
        std,
    ):
        self.interpolation = interpolation
        resample = _resample.resampling(interpolation, antialias)
        self.antialias = resample.antialias
        self.mode = mode
        self.apply_exif_orientation = bool(apply_exif_orientation)
        self.on_warning = on_warning
        self.max_pixels = max_pixels
        self.decode_scale = check_scale(decode_scale)
        self.dtype = dtype
        # Checked once here, so that a bad option fails when the transform is built, not in a worker.
        options = _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels)
        self.mean, self.std = _resample.normalization(mean, std, options.mode)
        self._resample, self._options = resample, options

    def _op_options(self, size, resize_shorter: int) -> dict:
        """The operator's options; built once, and checked with an empty batch, whose call checks every
        argument as any call does (so that a bad mean, std or dtype fails here)."""
        kwargs = _resample.op_options(
            size, resize_shorter, self.decode_scale, self._resample, self.dtype, self.mean, self.std, self._options
        )
        if self._options.mode != int(ImageReadMode.UNCHANGED):
            _resample.check_options(kwargs)
        return kwargs

    def _batch(self, tensors, windows, flips, device, stream, on_error, gpu_decoder):
        placement = _device.placement(device, stream, False, gpu_decoder)
        return _resample.run_batch(
            tensors, windows, flips, self._kwargs, placement, _args.on_error_check(on_error), stacklevel=6
        )


class RandomResizedCropJpeg(_JpegTransform):
    """torchvision's ``RandomResizedCrop`` (+ optional ``RandomHorizontalFlip``) applied to JPEG bytes.

    ``t(data)`` returns a uint8 tensor ``[C, size_h, size_w]``: a random window (area a uniform
    fraction in ``scale`` of the image, aspect ratio log-uniform in ``ratio``; see :meth:`get_params`)
    decoded at the smallest DCT scale that keeps it at least ``size`` and resized with
    ``interpolation``. With ``hflip_p > 0`` it is then flipped left-right with that probability.

    Randomness and reproducibility: with ``generator=None`` the draws come from torch's global RNG,
    in the order torchvision makes them: :meth:`get_params`' draws (up to 10 attempts, each
    ``uniform_`` for the area, ``uniform_`` for the log-ratio, and on success two ``randint`` for the
    offsets), then, when ``hflip_p > 0``, one ``torch.rand(1)`` as ``RandomHorizontalFlip``. So after
    ``torch.manual_seed(k)`` the windows (and flips) are those of
    ``Compose([RandomResizedCrop(...), RandomHorizontalFlip(p)])`` on the same image sizes after the same
    seed. Pass a ``torch.Generator`` (or an int seed, which makes a new Generator) to ``__call__`` or
    :meth:`get_params` to draw from it instead, e.g. one generator per sample seeded from
    (epoch, index) for results independent of worker scheduling.

    At ``decode_scale=8`` the pixels equal torchvision's ``RandomResizedCrop`` on a PIL image (full decode,
    crop, Pillow resize); by default smaller DCT scales are used (see decode_and_resized_crop_jpeg).

    Args:
        size: output size, int or (h, w).
        scale: range of the window's area as a fraction of the image's, (min, max).
        ratio: range of the window's aspect ratio width / height, (min, max); drawn log-uniformly.
        interpolation, antialias: as decode_and_resized_crop_jpeg (default bilinear, antialiased).
        hflip_p: probability of a horizontal flip of the output (0: never, and no RNG draw).
        mode, apply_exif_orientation, on_warning, max_pixels: as decode_and_crop_jpeg. With
            apply_exif_orientation the window is drawn in the displayed frame.
        decode_scale: force the DCT scale in eighths (8: full resolution); None picks per window.
        dtype: the output's dtype: ``torch.uint8`` (default), or ``torch.float32``, ``torch.float16`` or
            ``torch.bfloat16``, whose values are ``x / 255`` (``ToTensor``).
        mean, std: None (default), or torchvision ``Normalize``'s values for images in [0, 1], one per
            channel (or one for all), given together with a float ``dtype``: the output is then
            ``(x / 255 - mean) / std``, computed in float32 and rounded to ``dtype`` as torch rounds:
            what ``ToTensor``, ``Normalize`` and ``.to(dtype)`` give on the uint8 output, bit for bit.
            They belong to the transform (not to a call) so that ``t(data)`` and ``t.batch(...)`` give
            the same tensors.
    """

    def __init__(
        self,
        size,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        interpolation: str = "bilinear",
        antialias: bool = True,
        hflip_p: float = 0.0,
        mode: ImageReadMode = ImageReadMode.RGB,
        apply_exif_orientation: bool = False,
        on_warning: str = "raise",
        max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
        decode_scale: Optional[int] = None,
        dtype: torch.dtype = torch.uint8,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
    ):
        super().__init__(
            interpolation,
            antialias,
            mode,
            apply_exif_orientation,
            on_warning,
            max_pixels,
            decode_scale,
            dtype,
            mean,
            std,
        )
        self.size = output_size(size)
        self.scale = _range("scale", scale)
        self.ratio = _range("ratio", ratio)
        hflip_p = float(hflip_p)
        if not 0.0 <= hflip_p <= 1.0:
            raise ValueError(f"hflip_p must be a probability in [0, 1], got {hflip_p}")
        self.hflip_p = hflip_p
        self._kwargs = self._op_options(self.size, 0)

    def get_params(self, height: int, width: int, generator: GeneratorLike = None) -> tuple[int, int, int, int]:
        """A window (top, left, height, width) of a height x width image, drawn as torchvision's
        ``RandomResizedCrop.get_params``: up to 10 attempts of area ~ U(scale) * image area and
        aspect ~ exp(U(log ratio)), w = round(sqrt(area * aspect)), h = round(sqrt(area / aspect)),
        kept when it fits (offsets then uniform); else the centred crop of the whole image with the
        aspect clamped into ``ratio``."""
        height, width = as_int("height", height), as_int("width", width)
        if height < 1 or width < 1:
            raise ValueError(f"image size must be positive, got height={height}, width={width}")
        g = _generator(generator)
        area = height * width
        # The same tensor operations as torchvision (float32 log and exp included), so the same values.
        log_ratio = torch.log(torch.tensor(self.ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1], generator=g).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=g)).item()
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,), generator=g).item()
                j = torch.randint(0, width - w + 1, size=(1,), generator=g).item()
                return i, j, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio):
            w = width
            h = int(round(w / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h = height
            w = int(round(h * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, data: Data, generator: GeneratorLike = None) -> torch.Tensor:
        """A random window of the JPEG ``data``, resized to ``size`` (and maybe flipped): a tensor
        ``[C, size_h, size_w]`` of ``dtype``. ``generator``: None (torch's global RNG), a
        torch.Generator or an int seed. Runs on the calling thread."""
        tensor = _args.as_tensor(data)
        window, flip = self._draw(tensor, _generator(generator))
        return _resample.one_image(tensor, window, flip, self._kwargs)

    def batch(
        self,
        datas: Sequence,
        generator: GeneratorLike = None,
        *,
        device: Union[str, torch.device] = "cpu",
        stream: Optional[torch.cuda.Stream] = None,
        on_error: str = "raise",
        gpu_decoder: str = "auto",
    ):
        """The transform of every file of ``datas`` in one call: a tensor ``[N, C, size_h, size_w]`` of
        ``dtype``, item ``i`` equal to ``self(datas[i], generator=g)`` in a loop over the files with one
        generator ``g``.

        The windows and flips are drawn first, file by file, with the same RNG calls in the same order
        as that loop (each file's header is read for its size); then all the files are decoded and
        resized in one call of :func:`custom_op.decode_and_resized_crop_jpegs`, in parallel on torch's
        intra-op thread pool on the CPU.

        Args:
            datas: a list or tuple of encoded files (each as ``__call__`` takes one).
            generator: None (torch's global RNG), a torch.Generator, or an int seed that makes one
                Generator for the whole batch.
            device, stream, gpu_decoder: as :func:`custom_op.decode_and_resized_crop_jpegs`.
            on_error: ``"raise"`` (default): the first bad file raises its exception (a file whose
                header cannot be read raises before the later files' draws, as the loop would).
                ``"return"``: returns ``(tensor, errors)``, a bad file's slot zeros and ``errors[i]``
                its exception (None for good files); a file whose header cannot be read draws nothing.
        """
        on_error = _args.on_error_check(on_error)
        tensors = _args.tensors(datas, caller="RandomResizedCropJpeg.batch")
        g = _generator(generator)
        windows: list[list[int]] = [[], [], [], []]
        flips, unread = [], {}
        for i, tensor in enumerate(tensors):
            try:
                window, flip = self._draw(tensor, g)
            except (RuntimeError, ValueError) as e:
                if on_error == "raise":
                    raise type(e)(_outcomes.named(str(e), i)) from None
                unread[i] = type(e)(_outcomes.named(str(e), i))
                window, flip = (0, 0, 1, 1), False
            for values, v in zip(windows, window):
                values.append(v)
            flips.append(int(flip))
        if unread:
            # The operator fails these at once (no JPEG), and their exceptions are the header's.
            tensors = [torch.empty(0, dtype=torch.uint8) if i in unread else t for i, t in enumerate(tensors)]
        result = self._batch(tensors, windows, flips if self.hflip_p > 0 else [], device, stream, on_error, gpu_decoder)
        if on_error == "raise":
            return result
        images, errors = result
        for i, error in unread.items():
            errors[i] = error
        return images, errors

    def _draw(self, tensor: torch.Tensor, g: Optional[torch.Generator]) -> tuple[tuple[int, int, int, int], bool]:
        """One file's window and flip, from its header's size: torchvision's draws, in its order."""
        info = read_jpeg_header(tensor, apply_exif_orientation=self.apply_exif_orientation)
        window = self.get_params(info.height, info.width, g)
        # The flip is drawn after the window, as RandomHorizontalFlip after RandomResizedCrop; the
        # decode draws nothing. The resampler writes the flipped output itself.
        flip = self.hflip_p > 0 and bool(torch.rand(1, generator=g) < self.hflip_p)
        return window, flip

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"interpolation={self.interpolation!r}, antialias={self.antialias}, hflip_p={self.hflip_p})"
        )


class ResizeCenterCropJpeg(_JpegTransform):
    """The evaluation transform ``Resize(resize_size)`` + ``CenterCrop(crop_size)``, fused, on JPEG bytes.

    The shorter side is resized to ``resize_size`` (the longer to ``int(resize_size * long / short)``,
    torchvision's truncation), and the centred ``crop_size`` square is kept (offset
    ``round((resized - crop) / 2)``, Python's rounding, as torchvision). Instead of resizing the whole
    image, the full-resolution rows and columns under the crop (plus the filter's reach) are decoded,
    at the smallest DCT scale that keeps the image at least the resized size, and only the crop's
    output pixels are computed, on the same sampling grid as the whole-image resize. So at
    ``decode_scale=8`` the result equals resize-then-crop with Pillow exactly (taps near the crop's
    edges read the pixels beyond it, as the whole-image resize does); at smaller scales it differs by
    the DCT downscale only. The resized size is the same integer torchvision computes: the fractional
    window that the crop covers in the full-resolution image is used as it is, not rounded.

    Args:
        resize_size: the shorter side after resizing (int).
        crop_size: the centred crop, int (square) or (h, w); it must fit in the resized image
            (torchvision pads when it does not; this transform raises ValueError).
        interpolation, antialias, mode, apply_exif_orientation, on_warning, max_pixels: as
            :class:`RandomResizedCropJpeg`.
        decode_scale, dtype, mean, std: as :class:`RandomResizedCropJpeg`.
    """

    def __init__(
        self,
        resize_size: int = 256,
        crop_size=224,
        interpolation: str = "bilinear",
        antialias: bool = True,
        mode: ImageReadMode = ImageReadMode.RGB,
        apply_exif_orientation: bool = False,
        on_warning: str = "raise",
        max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
        decode_scale: Optional[int] = None,
        dtype: torch.dtype = torch.uint8,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
    ):
        super().__init__(
            interpolation,
            antialias,
            mode,
            apply_exif_orientation,
            on_warning,
            max_pixels,
            decode_scale,
            dtype,
            mean,
            std,
        )
        self.resize_size = as_int("resize_size", resize_size)
        if self.resize_size < 1:
            raise ValueError(f"resize_size must be positive, got {resize_size}")
        self.crop_size = output_size(crop_size)
        if min(self.crop_size) > self.resize_size:
            raise ValueError(
                f"crop_size {crop_size} is larger than resize_size {resize_size}: the crop would "
                "need padding, which this transform does not do"
            )
        self._kwargs = self._op_options(self.crop_size, self.resize_size)

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) of the image after Resize(resize_size), as torchvision computes it."""
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.resize_size, int(self.resize_size * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)

    def __call__(self, data: Data) -> torch.Tensor:
        """The centred crop of the JPEG ``data`` resized: a tensor ``[C, crop_h, crop_w]`` of ``dtype``.
        Raises ValueError when the crop does not fit in the resized image. Runs on the calling thread."""
        return _resample.one_image(_args.as_tensor(data), (), False, self._kwargs)

    def batch(
        self,
        datas: Sequence,
        *,
        device: Union[str, torch.device] = "cpu",
        stream: Optional[torch.cuda.Stream] = None,
        on_error: str = "raise",
        gpu_decoder: str = "auto",
    ):
        """The transform of every file of ``datas`` in one call: a tensor ``[N, C, crop_h, crop_w]`` of
        ``dtype``, item ``i`` equal to ``self(datas[i])``, computed by
        :func:`custom_op.decode_and_resized_crop_jpegs`' operator (in parallel on torch's intra-op
        thread pool on the CPU). ``device``, ``stream``, ``on_error`` and ``gpu_decoder``: as that
        function's."""
        tensors = _args.tensors(datas, caller="ResizeCenterCropJpeg.batch")
        return self._batch(tensors, [[], [], [], []], [], device, stream, on_error, gpu_decoder)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(resize_size={self.resize_size}, crop_size={self.crop_size}, "
            f"interpolation={self.interpolation!r}, antialias={self.antialias})"
        )
