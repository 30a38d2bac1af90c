"""custom_op: decode only the part of a JPEG that a training step uses."""

from ._build import load_library as _load_library

_load_library()

from . import _ops  # noqa: E402  (the operators must exist before their fake kernels are registered)

_ops.register_fake_kernels()

from .decode import (  # noqa: E402
    DEFAULT_MAX_PIXELS,
    ImageReadMode,
    JpegInfo,
    cuda_available,
    decode_and_crop_jpeg,
    decode_jpeg,
    read_jpeg_header,
)
from .prepare import prepare_jpeg  # noqa: E402
from .resized_crop import decode_and_resized_crop_jpeg  # noqa: E402
from .transforms import RandomResizedCropJpeg, ResizeCenterCropJpeg  # noqa: E402

__all__ = ["DEFAULT_MAX_PIXELS", "ImageReadMode", "JpegInfo", "decode_and_crop_jpeg", "decode_jpeg",
           "read_jpeg_header", "cuda_available", "decode_and_resized_crop_jpeg", "RandomResizedCropJpeg", "ResizeCenterCropJpeg",
           "prepare_jpeg"]
