"""Argument conversion and checks shared by every public function: what the C++ operators take,
made from what users pass, with one wording for every error.

Nothing here calls an operator; the functions raise TypeError or ValueError before any work starts.
"""

from __future__ import annotations

import array
import enum
import operator
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional, Union

import torch

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

    The name as a string (``"rgb"``, ``"GRAY"``) is accepted wherever a mode is.
    """

    UNCHANGED = 0
    GRAY = 1
    RGB = 2


#: What the decoding functions accept as a file's bytes.
Data = Union[bytes, bytearray, memoryview, torch.Tensor, Any]

#: The channel count of each mode that sets one (UNCHANGED has the file's).
MODE_CHANNELS = {int(ImageReadMode.GRAY): 1, int(ImageReadMode.RGB): 3}
ON_WARNING = {"raise": 0, "warn": 1, "ignore": 2}
# The gpu_decoder option's values, by their codes in the CUDA operators (cuda/batch_item.h, GpuDecoder).
GPU_DECODERS = {"auto": 0, "cuda": 1, "nvjpeg": 2}
ON_ERROR = ("raise", "return")
_INT64_MAX = 2**63 - 1


def as_tensor(data: Data) -> torch.Tensor:
    """A 1-D uint8 CPU tensor viewing ``data``'s bytes, without copying them.

    Tensors must be 1-D, contiguous, uint8 and on the CPU; anything else must export a contiguous
    1-D buffer of bytes (bytes, bytearray, memoryview, a uint8 numpy array, mmap, ...).
    """
    if type(data) is bytes and data and _read_only_seen:
        # The common case of a file read whole, once torch's warning about read-only buffers is spent:
        # bytes are always a contiguous 1-D buffer of bytes, and the checks below pass.
        return torch.frombuffer(data, dtype=torch.uint8)
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8:
            raise TypeError(f"data must be a uint8 tensor, got dtype {data.dtype}")
        if data.dim() != 1:
            raise TypeError(f"data must be a 1-D tensor of bytes, got shape {tuple(data.shape)}")
        if not data.is_cpu:  # (is_cpu: reading .device builds an object, for every file of a batch)
            raise TypeError(f"data must be on the CPU (the encoded bytes), got a tensor on {data.device}")
        if not data.is_contiguous():
            raise TypeError("data must be a contiguous tensor; call .contiguous() first")
        return data
    if isinstance(data, (str, list, tuple)):
        raise TypeError(
            f"data must be the bytes of one file (bytes, bytearray, memoryview, a 1-D uint8 array or "
            f"tensor), got {type(data).__name__}"
        )
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(
            "data must be bytes, bytearray, memoryview, a 1-D uint8 numpy array or a 1-D uint8 tensor, "
            f"got {type(data).__name__}"
        ) from None
    dtype = getattr(data, "dtype", None)  # numpy arrays: name the dtype rather than the buffer format
    if view.format not in ("B", "b", "c") or view.itemsize != 1 or (dtype is not None and str(dtype) != "uint8"):
        raise TypeError(
            f"data must be a buffer of bytes (uint8), got {dtype if dtype is not None else repr(view.format)}"
        )
    if view.ndim != 1:
        raise TypeError(f"data must be 1-D, got shape {view.shape}")
    if not view.c_contiguous:
        raise TypeError("data must be contiguous (for numpy arrays: np.ascontiguousarray first)")
    if view.nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    view = view.cast("B")
    if view.readonly and not _read_only_seen:
        # The decoder only reads; torch warns about read-only buffers once per process, which is noise
        # here. Only the first call is guarded: catching warnings costs more than the rest of this.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.frombuffer(view, dtype=torch.uint8)
        _read_only_seen.append(True)
        return tensor
    return torch.frombuffer(view, dtype=torch.uint8)


# Not empty once a read-only buffer has been viewed (torch's warning about them is then spent).
_read_only_seen: list = []


def as_int(name: str, value) -> int:
    """An int from anything with __index__ (not a float, not a bool's surprise: bools are ints here)."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not -_INT64_MAX <= value <= _INT64_MAX:
        raise ValueError(f"{name}={value} is out of range")
    return value


def window(top, left, height, width) -> tuple[int, int, int, int]:
    """(top, left, height, width) as ints, the size at least 1 (where it lies is checked against the
    image by the decoder, which reads the header)."""
    values = (as_int("top", top), as_int("left", left), as_int("height", height), as_int("width", width))
    size_check(values[2], values[3])
    return values


def size_check(height: int, width: int, where: str = "") -> None:
    if height < 1 or width < 1:
        raise ValueError(
            f"custom_op: {where}the crop window's height and width must be at least 1, got "
            f"height={height} and width={width}"
        )


def mode_code(mode) -> int:
    if isinstance(mode, str):
        try:
            return int(ImageReadMode[mode.upper()])
        except KeyError:
            raise ValueError(f"mode must be one of UNCHANGED, GRAY, RGB, got {mode!r}") from None
    if isinstance(mode, ImageReadMode):
        return int(mode)
    raise TypeError(f"mode must be an ImageReadMode or its name, got {type(mode).__name__}")


class DecodeOptions(NamedTuple):
    """The options every decoding operator takes, checked and coded once: the operators take them by
    name (``**options.op_kwargs()``; keyword-only in their schemas, csrc/ops.cpp)."""

    mode: int  #: an ImageReadMode code
    apply_exif_orientation: bool
    on_warning: int  #: an ON_WARNING code
    max_pixels: int  #: 0 for no limit

    @property
    def warns(self) -> bool:
        """True with on_warning="warn": the operators then return libjpeg's warnings to emit."""
        return self.on_warning == ON_WARNING["warn"]

    def op_kwargs(self) -> dict:
        kwargs = _OP_KWARGS.get(self)
        if kwargs is None:
            kwargs = self._asdict()
            if len(_OP_KWARGS) < 64:
                _OP_KWARGS[self] = kwargs
        return kwargs


# op_kwargs of the options seen (a few kinds per program): a call passes them on without building them.
# Operators only read them.
_OP_KWARGS: dict = {}


def decode_options(mode, apply_exif_orientation, on_warning, max_pixels) -> DecodeOptions:
    """The public decoding options as every decoding operator takes them."""
    if (
        mode is ImageReadMode.RGB
        and apply_exif_orientation is False
        and type(on_warning) is str
        and on_warning == "raise"
        and max_pixels is DEFAULT_MAX_PIXELS
    ):
        return _DEFAULT_OPTIONS  # the public functions' defaults, checked once
    return DecodeOptions(
        mode_code(mode), bool(apply_exif_orientation), warning_code(on_warning), pixel_limit(max_pixels)
    )


def flag(name: str, value) -> bool:
    """A switch given as True or False: anything else (a string such as "false" is truthy) is refused."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def gpu_decoder(value) -> int:
    """The code of a gpu_decoder option."""
    try:
        return GPU_DECODERS[value]
    except (KeyError, TypeError):
        raise ValueError(f"gpu_decoder must be 'auto', 'cuda' or 'nvjpeg', got {value!r}") from None


def warning_code(on_warning: str) -> int:
    try:
        return ON_WARNING[on_warning]
    except (KeyError, TypeError):
        raise ValueError(f"on_warning must be 'raise', 'warn' or 'ignore', got {on_warning!r}") from None


def on_error_check(on_error: str) -> str:
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'raise' or 'return', got {on_error!r}")
    return on_error


def pixel_limit(max_pixels: Optional[int]) -> int:
    """The operators' max_pixels: 0 for no limit."""
    if max_pixels is None:
        return 0
    max_pixels = as_int("max_pixels", max_pixels)
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive or None, got {max_pixels}")
    return max_pixels


def device(value) -> torch.device:
    """A CPU or CUDA torch.device ("cuda" keeps no index: the current device at call time)."""
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {value!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {value!r}")
    return dev


def stream_check(dev: torch.device, stream) -> None:
    if stream is None:
        return
    if dev.type != "cuda":
        raise ValueError("stream applies to device='cuda' only")
    if not isinstance(stream, torch.cuda.Stream):
        raise TypeError(f"stream must be a torch.cuda.Stream, got {type(stream).__name__}")


def tensors(data: Sequence, check_tensors: bool = True, caller: Optional[str] = None) -> list[torch.Tensor]:
    """The files of a batch as tensors; the message names the bad item. ``caller``: the public function
    that takes the list, named in the message when ``data`` is not one (default: the batched decodes).

    ``check_tensors=False``: a batch of torch tensors only is passed on as it is, for an operator that
    checks each file itself and reports a bad one as that item's TypeError (the CUDA operator does).
    (Four attribute reads per file were most of a GPU batch call's Python time before its operator.)
    """
    if isinstance(data, (bytes, bytearray, memoryview, str, torch.Tensor)) or not isinstance(data, Sequence):
        if caller is not None:
            raise TypeError(f"custom_op: {caller} takes a list or tuple of encoded files, got {type(data).__name__}")
        raise TypeError(
            "data must be a list or tuple of encoded files (for one file use decode_and_crop_jpeg / "
            f"decode_jpeg), got {type(data).__name__}"
        )
    if not check_tensors:
        out = list(data)
        if set(map(type, out)) <= {torch.Tensor}:
            return out
    out = []
    for i, d in enumerate(data):
        try:
            out.append(as_tensor(d))
        except TypeError as e:
            raise TypeError(f"custom_op: batch item {i}: {e}") from None
    return out


def per_image(value):
    """A window argument as given per image (a list or tuple; a 1-D tensor or array becomes a list), or
    one value for every image (anything else; a 0-d tensor or array becomes a Python scalar)."""
    if hasattr(value, "tolist") and not isinstance(value, (int, bool)):
        return value.tolist()
    return value


def int_list(name: str, value, n: int) -> list[int]:
    """One int per image, from one int for all or a sequence (list, tuple, 1-D tensor or array)."""
    value = per_image(value)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} entries for {n} images")
        # Ints in range, the common case, are checked and converted in one pass in C (array typecode
        # "q": 64-bit signed); anything else gets its own message below.
        try:
            return array.array("q", value).tolist()
        except (TypeError, OverflowError):
            return [as_int(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return [as_int(name, value)] * n


_DEFAULT_OPTIONS = DecodeOptions(int(ImageReadMode.RGB), False, ON_WARNING["raise"], DEFAULT_MAX_PIXELS)
