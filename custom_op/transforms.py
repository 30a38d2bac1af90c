"""Training and evaluation transforms that go from a JPEG's bytes to the network's input size in one call.

Both read only the header to place their window, then decode just that window at a reduced DCT scale
(custom_op.decode_and_resized_crop_jpeg), so they fit in ``Dataset.__getitem__`` in place of
"decode the file, then torchvision's transform".

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

from . import _args, _resample
from ._args import DEFAULT_MAX_PIXELS, Data, ImageReadMode, as_int
from ._resample import check_scale, choose_scale, output_size
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
    """Options shared by both transforms: decoding mode, filter, and the DCT scale policy."""

    def __init__(self, interpolation, antialias, mode, apply_exif_orientation, on_warning, max_pixels, decode_scale):
        self.interpolation = interpolation
        self._resample = _resample.resampling(interpolation, antialias)
        self.antialias = self._resample.antialias
        self.mode = mode
        self.apply_exif_orientation = bool(apply_exif_orientation)
        self.on_warning = on_warning
        self.max_pixels = max_pixels
        self.decode_scale = check_scale(decode_scale)
        # Checked once here, so that a bad option fails when the transform is built, not in a worker.
        self._options = _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels)

    def _header(self, data: Data):
        tensor = _args.as_tensor(data)
        info = read_jpeg_header(tensor, apply_exif_orientation=self.apply_exif_orientation)
        return tensor, info.height, info.width


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
    ):
        super().__init__(interpolation, antialias, mode, apply_exif_orientation, on_warning, max_pixels, decode_scale)
        self.size = output_size(size)
        self.scale = _range("scale", scale)
        self.ratio = _range("ratio", ratio)
        hflip_p = float(hflip_p)
        if not 0.0 <= hflip_p <= 1.0:
            raise ValueError(f"hflip_p must be a probability in [0, 1], got {hflip_p}")
        self.hflip_p = hflip_p

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
        """A random window of the JPEG ``data``, resized to ``size`` (and maybe flipped): a uint8 tensor
        ``[C, size_h, size_w]``. ``generator``: None (torch's global RNG), a torch.Generator or an int seed."""
        tensor, height, width = self._header(data)
        g = _generator(generator)
        window = self.get_params(height, width, g)
        # Drawn before the decode, which draws nothing: the same draws in the same order as
        # RandomResizedCrop then RandomHorizontalFlip. The resampler writes the flipped output itself.
        flip = self.hflip_p > 0 and bool(torch.rand(1, generator=g) < self.hflip_p)
        return _resample.resized_crop(
            tensor, (height, width), window, self.size, self.decode_scale, self._resample, self._options, flip
        )

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
        interpolation, antialias, mode, apply_exif_orientation, on_warning, max_pixels, decode_scale:
            as :class:`RandomResizedCropJpeg`.
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
    ):
        super().__init__(interpolation, antialias, mode, apply_exif_orientation, on_warning, max_pixels, decode_scale)
        self.resize_size = as_int("resize_size", resize_size)
        if self.resize_size < 1:
            raise ValueError(f"resize_size must be positive, got {resize_size}")
        self.crop_size = output_size(crop_size)
        if min(self.crop_size) > self.resize_size:
            raise ValueError(
                f"crop_size {crop_size} is larger than resize_size {resize_size}: the crop would "
                "need padding, which this transform does not do"
            )

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) of the image after Resize(resize_size), as torchvision computes it."""
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.resize_size, int(self.resize_size * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)

    def __call__(self, data: Data) -> torch.Tensor:
        """The centred crop of the JPEG ``data`` resized: a uint8 tensor ``[C, crop_h, crop_w]``."""
        tensor, height, width = self._header(data)
        rh, rw = self.resized_size(height, width)
        ch, cw = self.crop_size
        if ch > rh or cw > rw:
            raise ValueError(
                f"crop_size {self.crop_size} does not fit in the resized image {rh}x{rw} (torchvision "
                "would pad; this transform does not)"
            )
        top, left = int(round((rh - ch) / 2.0)), int(round((rw - cw) / 2.0))
        if self.decode_scale is not None:
            s = self.decode_scale
        else:
            s = choose_scale(height, width, (rh, rw))
        rows = _resample.resize_crop_axis(height, s, rh, top, ch, self._resample)
        cols = _resample.resize_crop_axis(width, s, rw, left, cw, self._resample)
        return _resample.decode_and_resample(tensor, rows, cols, s, self._resample, self._options)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(resize_size={self.resize_size}, crop_size={self.crop_size}, "
            f"interpolation={self.interpolation!r}, antialias={self.antialias})"
        )
