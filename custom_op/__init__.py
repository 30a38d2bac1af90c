"""custom_op: decode only the part of a JPEG that a training step uses."""

from . import _build

_build.load_library()

from . import _ops  # noqa: E402  (the operators must exist before their fake kernels are registered)

_ops.register_fake_kernels()

from ._args import DEFAULT_MAX_PIXELS, ImageReadMode  # noqa: E402
from ._build import library_info  # noqa: E402
from .batch import decode_and_crop_jpegs, decode_jpegs  # noqa: E402
from .decode import JpegInfo, decode_and_crop_jpeg, decode_jpeg, read_jpeg_header  # noqa: E402
from .decode_ahead import decode_ahead  # noqa: E402
from .gpu import cuda_available  # noqa: E402
from .packed_files import PackedFiles, pack_files  # noqa: E402
from .prepare import prepare_jpeg  # noqa: E402
from .resized_crop import decode_and_resized_crop_jpeg, decode_and_resized_crop_jpegs  # noqa: E402
from .transforms import RandomResizedCropJpeg, ResizeCenterCropJpeg  # noqa: E402

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "ImageReadMode",
    "JpegInfo",
    "PackedFiles",
    "RandomResizedCropJpeg",
    "ResizeCenterCropJpeg",
    "cuda_available",
    "decode_and_crop_jpeg",
    "decode_and_crop_jpegs",
    "decode_and_resized_crop_jpeg",
    "decode_and_resized_crop_jpegs",
    "decode_ahead",
    "decode_jpeg",
    "decode_jpegs",
    "library_info",
    "pack_files",
    "prepare_jpeg",
    "read_jpeg_header",
]
