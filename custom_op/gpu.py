"""The GPU backend's library: whether it can run here, loading it, and what it found.

Nothing here runs at ``import custom_op``: the CUDA library (nvJPEG and our kernels) is loaded on the
first call with ``device="cuda"``, by the same loader as the CPU library: the one setup.py prebuilt
(custom_op/_C_cuda*.so) when it matches the installed sources, torch, CUDA, Python and this GPU's
architecture, else one built on first use into the just-in-time cache, under the same file lock.
Decoding itself goes through the device-neutral functions (``custom_op.decode_and_crop_jpeg``,
``custom_op.decode_and_crop_jpegs``, ...) with ``device="cuda"``. For example::

    from custom_op import gpu

    gpu.cuda_available()   # False on a machine without a CUDA GPU or nvJPEG
    gpu.backend_info()     # nvJPEG version, JPEG engines, ...; says why not where it cannot run
"""

from __future__ import annotations

import threading
from typing import NamedTuple, Optional, Union

import torch

from . import _build, _outcomes
from . import _build_config as config
from ._nvjpeg_paths import NvjpegNotFound, find_nvjpeg

__all__ = ["BackendInfo", "PATH_NAMES", "backend_info", "cuda_available", "load_library", "unavailable_reason"]

#: Which decoder took an item (the CUDA operator's path codes, csrc/common/decode_path.h). Added to a
#: code: SEGMENTS_FLAG, when nvJPEG decoded the sub-image of a prepared file's restart segments.
PATH_NAMES = {
    0: "hardware-roi",
    1: "hardware-full",
    2: "gpu-hybrid",
    3: "hybrid",
    4: "cpu",
    5: "failed",
    7: "cuda",
}
SEGMENTS_FLAG = 16

_load_lock = threading.Lock()
_loaded: dict[str, str] = {}
_load_error: list[BaseException] = []

# The functions that moved to the package's top level, for a message naming the new call.
_MOVED = {"decode_and_crop_jpegs": "custom_op.decode_and_crop_jpegs", "decode_jpegs": "custom_op.decode_jpegs"}


def __getattr__(name: str):
    if name in _MOVED:
        raise AttributeError(
            f"custom_op.gpu.{name} is now {_MOVED[name]}(..., device='cuda'); it decodes on the CPU too (device='cpu')"
        )
    raise AttributeError(f"module 'custom_op.gpu' has no attribute {name!r}")


def _no_cuda_reason() -> Optional[str]:
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    return None


def _prebuilt_usable(info: dict) -> Optional[str]:
    """Why a prebuilt GPU library whose sources and versions match cannot run on this GPU, or None."""
    capability = torch.cuda.get_device_capability()
    if config.arch_flags_cover(info.get("cuda_arch_flags", []), capability):
        return None
    return (
        f"compiled for {info.get('cuda_arch_flags')}, not for this GPU "
        f"(compute capability {capability[0]}.{capability[1]})"
    )


def load_library() -> dict[str, str]:
    """Loads the CUDA library (prebuilt, or built on first use); raises RuntimeError saying why it
    cannot. Returns what was loaded: kind (prebuilt / jit), path, cache_dir, built, nvJPEG version."""
    if _loaded:
        return _loaded
    with _load_lock:
        if _loaded:
            return _loaded
        if _load_error:
            raise RuntimeError(str(_load_error[0])) from _load_error[0]
        reason = _no_cuda_reason()
        if reason is not None:
            raise RuntimeError(f"custom_op: the GPU backend needs CUDA: {reason}")
        try:
            from torch.utils import cpp_extension

            library = config.cuda_library(find_nvjpeg(cpp_extension.CUDA_HOME))
            info = _build.load(library, usable=_prebuilt_usable)
        except (NvjpegNotFound, RuntimeError, OSError, TimeoutError) as e:
            # Remembered, so that a data loader does not retry a failing build on every batch.
            _load_error.append(e)
            raise RuntimeError(f"custom_op: the GPU backend is unavailable: {e}") from e
        _loaded.update(info)
        return _loaded


def unavailable_reason() -> Optional[str]:
    """None when ``device="cuda"`` works here, else why not (loads the CUDA library on first call)."""
    if _loaded:  # (asked on every GPU call: once loaded, the answer stands)
        return None
    reason = _no_cuda_reason()
    if reason is not None:
        return reason
    try:
        load_library()
    except RuntimeError as e:
        return str(e)
    return None


def cuda_available() -> bool:
    """True when decoding with ``device="cuda"`` works here: CUDA, a GPU and nvJPEG. The first call
    builds (or loads) the GPU library; importing custom_op never does."""
    return unavailable_reason() is None


class BackendInfo(NamedTuple):
    """What :func:`backend_info` reports."""

    available: bool  #: True when ``device="cuda"`` decodes here.
    reason: Optional[str]  #: Why the GPU backend cannot run here (None when it can).
    library: dict[str, str]  #: The CUDA library loaded (its kind, prebuilt or jit, its path...); empty when none.
    nvjpeg_version: Optional[str] = None  #: The nvJPEG library's version, such as ``"13.0.1"``.
    hardware: bool = False  #: True when nvJPEG decodes the files it gets on the GPU's JPEG engines.
    hardware_engines: int = 0  #: How many JPEG engines the GPU has (0 without).
    hardware_cores: int = 0  #: How many cores each JPEG engine has.
    hardware_note: str = ""  #: Why the engines are not used, where they are not.
    torch_allocators: bool = False  #: True when nvJPEG takes its memory from PyTorch's caching allocators.


def backend_info(device: Union[str, torch.device, int, None] = None) -> BackendInfo:
    """What the GPU backend found on ``device`` (default: the current CUDA device): nvJPEG's version,
    whether the JPEG engines are used, and the library in use. On a machine where it cannot run,
    ``available`` is False and ``reason`` says why; it never raises for that."""
    reason = unavailable_reason()
    if reason is not None:
        return BackendInfo(False, reason, {})
    raw = _outcomes.call(torch.ops.custom_op.gpu_backend_info, device=_device_index(device))
    return BackendInfo(True, None, dict(_loaded), *raw)


def _device_index(device) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device must be a CUDA device here, got {device!r}")
    return dev.index if dev.index is not None else torch.cuda.current_device()
