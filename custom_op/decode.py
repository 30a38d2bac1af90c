"""The public decoding functions: argument checking, input conversion and device dispatch.

The work happens in the C++ operators ``torch.ops.custom_op.*`` (csrc/); this module turns Python
inputs into what they take and documents every option.
"""

from __future__ import annotations

import enum
import operator
import warnings
from typing import NamedTuple, Optional, Union

import numpy as np
import torch

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "ImageReadMode",
    "JpegInfo",
    "cuda_available",
    "decode_and_crop_jpeg",
    "decode_jpeg",
    "read_jpeg_header",
]

#: Images whose header declares more pixels than this are refused before any memory is allocated for
#: them (a decompression-bomb guard). The same bound as Pillow's ``DecompressionBombError``
#: (2 * ``Image.MAX_IMAGE_PIXELS``). Pass ``max_pixels=None`` to lift it for one call.
DEFAULT_MAX_PIXELS = 178_956_970


class ImageReadMode(enum.IntEnum):
    """Which channels the decoders return.

    - ``UNCHANGED``: the file's own channels: 1 for grayscale, 3 (RGB) for YCbCr and RGB files,
      4 (CMYK, as ink amounts: 0 means no ink, Pillow's convention) for CMYK and YCCK files.
    - ``GRAY``: 1 channel. For YCbCr files this is the stored luma plane Y (as libjpeg, torchvision and
      Pillow's ``draft("L")`` give it), which can differ by a few levels from luma recomputed from RGB
      (Pillow's ``convert("L")``). CMYK files go through RGB and ITU-R 601 luma, as in Pillow.
    - ``RGB``: 3 channels. Grayscale is replicated; CMYK and YCCK are converted with Pillow's formula.
    """

    UNCHANGED = 0
    GRAY = 1
    RGB = 2


class JpegInfo(NamedTuple):
    """What the header says, read without decoding any pixel (see :func:`read_jpeg_header`)."""

    height: int
    width: int
    channels: int  #: components in the file: 1 (gray), 3 (YCbCr/RGB) or 4 (CMYK/YCCK)
    color_space: str  #: "gray", "ycbcr", "rgb", "cmyk", "ycck" or "unknown"
    subsampling: str  #: "4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "4:1:0", "gray" or "other"
    progressive: bool
    orientation: int  #: EXIF orientation, 1 (none) to 8
    #: The header declares a random-access layout (custom_op.prepare_jpeg writes one): sequential
    #: Huffman coding, all components in one scan, restart interval dividing the MCUs per row.
    #: decode_and_crop_jpeg then decodes only the restart segments around the window (after checking
    #: the markers; other files, and files whose markers do not match, take the ordinary path).
    random_access: bool = False


_COLOR_SPACES = {0: "unknown", 1: "gray", 2: "rgb", 3: "ycbcr", 4: "cmyk", 5: "ycck"}
_SUBSAMPLING = {(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0", (1, 2): "4:4:0", (4, 1): "4:1:1",
                (4, 2): "4:1:0"}
_ON_WARNING = {"raise": 0, "warn": 1, "ignore": 2}
_INT64_MAX = 2**63 - 1

Data = Union[bytes, bytearray, memoryview, np.ndarray, torch.Tensor]


def _as_tensor(data: Data) -> torch.Tensor:
    """A 1-D uint8 CPU tensor viewing ``data``'s bytes, without copying them."""
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8:
            raise TypeError(f"data must be a uint8 tensor, got dtype {data.dtype}")
        if data.dim() != 1:
            raise TypeError(f"data must be a 1-D tensor of bytes, got shape {tuple(data.shape)}")
        if data.device.type != "cpu":
            raise TypeError(f"data must be on the CPU (the encoded bytes), got a tensor on {data.device}")
        if not data.is_contiguous():
            raise TypeError("data must be a contiguous tensor; call .contiguous() first")
        return data
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise TypeError(f"data must be a 1-D uint8 array, got dtype {data.dtype} and shape {data.shape}")
        if not data.flags.c_contiguous:
            raise TypeError("data must be a contiguous array; call np.ascontiguousarray first")
        data = memoryview(data)
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
            raise TypeError("data must be a contiguous 1-D buffer of bytes")
        if view.nbytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        if view.readonly:
            # The decoder only reads; torch warns once about read-only buffers, which is noise here.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return torch.frombuffer(view, dtype=torch.uint8)
        return torch.frombuffer(view, dtype=torch.uint8)
    raise TypeError(
        "data must be bytes, bytearray, memoryview, a 1-D uint8 numpy array or a 1-D uint8 tensor, "
        f"got {type(data).__name__}")


def _as_int(name: str, value) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not -_INT64_MAX <= value <= _INT64_MAX:
        raise ValueError(f"{name}={value} is out of range")
    return value


def _mode_code(mode) -> int:
    if isinstance(mode, str):
        try:
            return ImageReadMode[mode.upper()]
        except KeyError:
            raise ValueError(f"mode must be one of UNCHANGED, GRAY, RGB, got {mode!r}") from None
    if isinstance(mode, ImageReadMode):
        return int(mode)
    raise TypeError(f"mode must be an ImageReadMode or its name, got {type(mode).__name__}")


def _warning_code(on_warning: str) -> int:
    try:
        return _ON_WARNING[on_warning]
    except (KeyError, TypeError):
        raise ValueError(f"on_warning must be 'raise', 'warn' or 'ignore', got {on_warning!r}") from None


def _pixel_limit(max_pixels: Optional[int]) -> int:
    if max_pixels is None:
        return 0
    max_pixels = _as_int("max_pixels", max_pixels)
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive or None, got {max_pixels}")
    return max_pixels


def _check_cpu(device) -> str:
    """The device's kind, "cpu" or "cuda"; raises for others, and for "cuda" where the GPU backend cannot run."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}") from None
    if kind == "cpu":
        return kind
    if kind == "cuda":
        from . import gpu  # loaded on first use only: importing custom_op stays CPU-only and fast

        reason = gpu.unavailable_reason()
        if reason is not None:
            raise RuntimeError(
                f"device='cuda': the GPU (nvJPEG) backend cannot run here ({reason}); "
                "decode on the CPU (device='cpu') and move the tensor with .to('cuda')")
        return kind
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def cuda_available() -> bool:
    """True when ``device="cuda"`` works here: CUDA, a GPU and nvJPEG. The first call builds (or loads)
    the GPU library; importing custom_op never does."""
    from . import gpu

    return gpu.cuda_available()


def _warn_about(decoded) -> torch.Tensor:
    """The image of a *_with_warnings op, after turning libjpeg's warnings into a UserWarning."""
    image, message = decoded
    if message:
        warnings.warn(f"custom_op: {message}", UserWarning, stacklevel=3)
    return image


def _check_stream(kind: str, stream) -> None:
    if stream is not None and kind != "cuda":
        raise ValueError("stream applies to device='cuda' only")


def decode_and_crop_jpeg(data: Data, top: int, left: int, height: int, width: int, *,
                         mode: ImageReadMode = ImageReadMode.RGB, apply_exif_orientation: bool = False,
                         on_warning: str = "raise", max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
                         device: Union[str, torch.device] = "cpu", stream=None, stack: bool = False,
                         on_error: str = "raise"):
    """Decodes only the window ``[top:top+height, left:left+width]`` of a JPEG.

    The result equals a full decode (libjpeg-turbo, ISLOW IDCT, fancy upsampling: what Pillow and
    torchvision use) followed by slicing, pixel for pixel. Only the window's columns are
    inverse-transformed and colour-converted, rows above it are entropy-decoded and skipped, and reading
    stops after its last row. The GIL is released while decoding.

    Args:
        data: the file's bytes: ``bytes``, ``bytearray``, ``memoryview``, a 1-D uint8 numpy array or a
            1-D contiguous uint8 CPU tensor (e.g. ``torch.frombuffer(f.read(), dtype=torch.uint8)``).
            Not copied.
        top, left: the window's first row and column, counted from 0.
        height, width: the window's size in pixels; both at least 1. The window must lie inside the
            image, else ValueError (see :func:`read_jpeg_header` for the size).
        mode: which channels to return; see :class:`ImageReadMode`. Default RGB.
        apply_exif_orientation: when True, the window is given in the displayed frame (after the
            EXIF orientation is applied, for all 8 orientations) and the output is oriented the same
            way. Default False: the stored frame, EXIF ignored.
        on_warning: what to do when libjpeg reports recoverable corruption (a warning such as
            "Premature end of JPEG file", after which it fills missing data with gray): ``"raise"``
            (default) raises RuntimeError; ``"warn"`` returns the image and emits a UserWarning;
            ``"ignore"`` returns the image silently. Only the part of the file that is read is
            checked: corruption below the window goes unnoticed.
        max_pixels: refuse (ValueError) files whose header declares more than this many pixels,
            before allocating anything for them. ``None`` disables the check.
        device: ``"cpu"`` (default) or ``"cuda"`` / ``"cuda:N"``: decode with nvJPEG (the GPU's
            JPEG engines where it has them) and return a CUDA tensor; see ``custom_op/gpu.py``.
            Files nvJPEG cannot take (CMYK, arithmetic coding, ...) are decoded by the CPU path and
            copied over. GPU pixels are not bit-exact with libjpeg (within a few levels).
        stream: device="cuda" only: the torch.cuda.Stream the output is ordered on (default: the
            current stream).
        stack, on_error: for the batched form only. Given lists (``data`` a list of files, the window
            arguments ints or one per file), all windows are decoded in one call and a list of
            tensors is returned; ``stack=True`` returns one ``[N, C, H, W]`` tensor instead, and
            ``on_error`` chooses between raising for the first bad file (``"raise"``, the message
            names its index) and returning its exception in its place (``"return"``). See
            :func:`custom_op.gpu.decode_and_crop_jpegs`.

    Returns:
        A contiguous uint8 tensor of shape ``[C, height, width]`` (C from ``mode``), on ``device``.

    Raises:
        TypeError: ``data`` is not bytes-like or not a 1-D contiguous uint8 CPU tensor/array, or a
            window argument is not an integer.
        ValueError: the window is empty or does not fit in the image (the message gives both), the
            header exceeds ``max_pixels``, or an option has an unknown value.
        RuntimeError: the data is not a JPEG libjpeg-turbo can decode (corrupt, truncated, empty,
            12-bit, ...), with libjpeg's message.
    """
    if isinstance(data, (list, tuple)):
        from .gpu import decode_and_crop_jpegs

        return decode_and_crop_jpegs(data, top, left, height, width, mode=mode,
                                     apply_exif_orientation=apply_exif_orientation, on_warning=on_warning,
                                     max_pixels=max_pixels, device=device, stream=stream, stack=stack,
                                     on_error=on_error)
    kind = _check_cpu(device)
    _check_stream(kind, stream)
    if kind == "cuda":
        from .gpu import _decode_one

        return _decode_one(_as_tensor(data), _as_int("top", top), _as_int("left", left), _as_int("height", height),
                           _as_int("width", width), _mode_code(mode), bool(apply_exif_orientation),
                           _warning_code(on_warning), _pixel_limit(max_pixels), device, stream)
    window = (_as_int("top", top), _as_int("left", left), _as_int("height", height), _as_int("width", width))
    policy = _warning_code(on_warning)
    if policy == _ON_WARNING["warn"]:
        return _warn_about(torch.ops.custom_op.decode_and_crop_jpeg_with_warnings(
            _as_tensor(data), *window, _mode_code(mode), bool(apply_exif_orientation), _pixel_limit(max_pixels)))
    return torch.ops.custom_op.decode_and_crop_jpeg(
        _as_tensor(data), *window, _mode_code(mode), bool(apply_exif_orientation), policy, _pixel_limit(max_pixels))


def decode_jpeg(data: Data, *, mode: ImageReadMode = ImageReadMode.RGB, apply_exif_orientation: bool = False,
                on_warning: str = "raise", max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
                device: Union[str, torch.device] = "cpu", stream=None, stack: bool = False,
                on_error: str = "raise"):
    """Decodes a whole JPEG into a uint8 tensor ``[C, H, W]``.

    The options mean the same as in :func:`decode_and_crop_jpeg`; with ``apply_exif_orientation``,
    H and W are the displayed height and width. A list of files is decoded in one call (a list of
    tensors, or with ``stack=True`` one ``[N, C, H, W]`` tensor).
    """
    if isinstance(data, (list, tuple)):
        from .gpu import decode_jpegs

        return decode_jpegs(data, mode=mode, apply_exif_orientation=apply_exif_orientation,
                            on_warning=on_warning, max_pixels=max_pixels, device=device, stream=stream,
                            stack=stack, on_error=on_error)
    kind = _check_cpu(device)
    _check_stream(kind, stream)
    if kind == "cuda":
        from .gpu import _decode_one

        return _decode_one(_as_tensor(data), 0, 0, 0, 0, _mode_code(mode), bool(apply_exif_orientation),
                           _warning_code(on_warning), _pixel_limit(max_pixels), device, stream, whole=True)
    policy = _warning_code(on_warning)
    if policy == _ON_WARNING["warn"]:
        return _warn_about(torch.ops.custom_op.decode_jpeg_with_warnings(
            _as_tensor(data), _mode_code(mode), bool(apply_exif_orientation), _pixel_limit(max_pixels)))
    return torch.ops.custom_op.decode_jpeg(
        _as_tensor(data), _mode_code(mode), bool(apply_exif_orientation), policy, _pixel_limit(max_pixels))


def _subsampling(channels: int, factors: list) -> str:
    if channels == 1:
        return "gray"
    luma, chroma = tuple(factors[0:2]), factors[2:]
    if any(f != 1 for f in chroma[:4]):  # Cb and Cr at full-size steps are what the names describe
        return "other"
    return _SUBSAMPLING.get(luma, "other")


def read_jpeg_header(data: Data, *, apply_exif_orientation: bool = False) -> JpegInfo:
    """Reads the size and format of a JPEG from its header, decoding no pixel.

    With ``apply_exif_orientation=True``, ``height`` and ``width`` are those of the displayed image
    (swapped for orientations 5 to 8), matching the frame that :func:`decode_and_crop_jpeg` uses with
    the same option. ``orientation`` is always reported.

    Raises TypeError for data that is not bytes-like, RuntimeError for data that is not a JPEG header
    libjpeg-turbo can parse.
    """
    values = torch.ops.custom_op.read_jpeg_header(_as_tensor(data), bool(apply_exif_orientation))
    height, width, channels, color_space, progressive, _arithmetic, orientation = values[:7]
    factors = values[7:7 + 2 * channels]
    random_access = len(values) > 7 + 2 * channels and bool(values[7 + 2 * channels])
    return JpegInfo(height, width, channels, _COLOR_SPACES.get(color_space, "unknown"),
                    _subsampling(channels, factors), bool(progressive), orientation, random_access)
