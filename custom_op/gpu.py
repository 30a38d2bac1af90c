"""The GPU backend (nvJPEG): availability, the lazy load of its C++/CUDA library, and the batched API.

Nothing here runs at ``import custom_op``: the CUDA library is loaded on the first call with
``device="cuda"``: the one setup.py prebuilt (custom_op/_C_cuda*.so) when it matches the installed
sources, torch, CUDA, Python and this GPU's architecture, else one built on first use, into the same
just-in-time cache and under the same file lock as the CPU library. On a machine without CUDA that
call raises RuntimeError saying why, and :func:`unavailable_reason` says the same without raising.

    import custom_op
    from custom_op import gpu

    gpu.cuda_available()                      # False on a machine without a CUDA GPU or nvJPEG
    imgs = custom_op.decode_and_crop_jpeg(list_of_bytes, tops, lefts, 224, 224, device="cuda")
    batch = custom_op.decode_and_crop_jpeg(list_of_bytes, tops, lefts, 224, 224, device="cuda", stack=True)
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from . import _build, _ops
from . import _build_config as config
from ._jpeg_paths import find_libjpeg_turbo
from ._nvjpeg_paths import NvjpegNotFound, find_nvjpeg
from .decode import (DEFAULT_MAX_PIXELS, ImageReadMode, _as_int, _as_tensor, _mode_code, _pixel_limit,
                     _warning_code)

__all__ = ["backend_info", "cuda_available", "decode_and_crop_jpegs", "decode_jpegs", "unavailable_reason"]

CUDA_LIBRARY = "custom_op_cuda"

# Where each item was decoded (the third output of the operator; see Path in csrc/cuda/decode_cuda.cpp).
PATHS = {0: "hardware-roi", 1: "hardware-full", 2: "gpu-hybrid", 3: "hybrid", 4: "cpu", 5: "failed",
         7: "gpu-batched"}
# Added to a path code when nvJPEG decoded the sub-image of a prepared file's restart segments; its
# name then ends in "+segments".
_SEGMENTS = 16

# Options of the operator for tests and benchmarks (csrc/cuda/decode_cuda.cpp); not for normal use.
DEBUG_NO_MARGIN = 1
DEBUG_UNGUARDED = 2
DEBUG_NO_HARDWARE = 4
DEBUG_NO_ROI = 8
DEBUG_FORCE_CPU = 16
DEBUG_NO_GPU_HYBRID = 32
_SINGLE = 64
DEBUG_PINNED_INPUTS = 128
DEBUG_NO_DEDUPE = 256
_WHOLE = 512
DEBUG_GPU_BATCHED_ALL = 1024  # every item the JPEG engines take goes to the GPU-hybrid batched decoder
DEBUG_NO_SEGMENTS = 2048  # files prepared for random access: nvJPEG gets the whole file, not the sub-image
DEBUG_ALWAYS_SEGMENTS = 4096  # ... the sub-image of the window's segments, whatever the image's size

_load_lock = threading.Lock()
_loaded: Dict[str, str] = {}
_load_error: List[BaseException] = []


def _build_and_load() -> Dict[str, str]:
    """The JIT build (first use) of the same sources and flags setup.py prebuilds (_build_config)."""
    from torch.utils import cpp_extension

    nvjpeg = find_nvjpeg(cpp_extension.CUDA_HOME)
    jpeg = find_libjpeg_turbo()
    with _build._lock:
        result = _build._build_and_load(
            CUDA_LIBRARY,
            config.cuda_sources(),
            extra_cflags=config.cuda_compile_flags(),
            extra_ldflags=config.cuda_link_flags(nvjpeg),
            include_dirs=config.cuda_include_dirs(nvjpeg, jpeg),
            headers=config.cuda_headers(),
            key_extra=[f"nvjpeg {nvjpeg.version} {nvjpeg.library_dir}/{nvjpeg.library_file}",
                       f"libjpeg-turbo {jpeg.version} {jpeg.prefix}"],
            with_cuda=True,
        )
    return {"kind": "jit", "nvjpeg_header_version": nvjpeg.version,
            "nvjpeg_library": os.path.join(nvjpeg.library_dir, nvjpeg.library_file), **result}


def _prebuilt() -> Optional[Dict[str, str]]:
    """The library setup.py put in the package (custom_op/_C_cuda*.so), if it was built from the
    installed sources for this torch, CUDA and Python, and for this GPU's architecture."""
    current = {
        "source_hash": config.cuda_source_hash(),
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": config.python_tag(),
    }
    found = config.find_prebuilt(config.CUDA_PREBUILT_NAME, config.CUDA_PREBUILT_INFO, current,
                                 log=_build._log if _build._verbose() else None)
    if found is None:
        return None
    path, info = found
    capability = torch.cuda.get_device_capability()
    if not config.arch_flags_cover(info.get("cuda_arch_flags", []), capability):
        if _build._verbose():
            _build._log(f"ignoring prebuilt {path}: compiled for {info.get('cuda_arch_flags')}, not for this GPU "
                        f"(compute capability {capability[0]}.{capability[1]})")
        return None
    return {"kind": "prebuilt", "path": path, "cache_dir": "", "built": "no",
            "nvjpeg_header_version": str(info.get("nvjpeg_version", "?")),
            "nvjpeg_library": str(info.get("nvjpeg_library", "?"))}


def _load() -> Dict[str, str]:
    """The prebuilt library when it matches (see _prebuilt), else the JIT cache, building into it if needed."""
    if not _build._flag(_build.ENV_FORCE_JIT):
        prebuilt = _prebuilt()
        if prebuilt is not None:
            try:
                torch.ops.load_library(prebuilt["path"])
                return prebuilt
            except OSError as e:
                # e.g. nvJPEG not where it was at build time (the library's rpath): a local build can still work.
                warnings.warn(f"custom_op: cannot load prebuilt {prebuilt['path']} ({e}); building it from source")
    return _build_and_load()


def _no_cuda_reason() -> Optional[str]:
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    return None


def load_library() -> Dict[str, str]:
    """Load the CUDA library (prebuilt, or built on first use); raises RuntimeError saying why it cannot.
    Returns what was loaded: kind (prebuilt / jit), path, cache_dir, built, nvJPEG header and library."""
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
            info = _load()
        except (NvjpegNotFound, RuntimeError, OSError, TimeoutError) as e:
            # Remembered, so that a data loader does not retry a failing build on every batch.
            _load_error.append(e)
            raise RuntimeError(f"custom_op: the GPU backend is unavailable: {e}") from e
        # The operator exists only now; its fake kernel lets FakeTensor tracing and opcheck see its outputs.
        try:
            _ops.register_cuda_fake_kernel()
        except RuntimeError as e:  # eager decoding does not need it
            warnings.warn(f"custom_op: no fake kernel for custom_op::_decode_jpegs_cuda ({e})")
        _loaded.update(info)
        return _loaded


def unavailable_reason() -> Optional[str]:
    """None when ``device="cuda"`` works here, else why not (loads the CUDA library on first call)."""
    reason = _no_cuda_reason()
    if reason is not None:
        return reason
    try:
        load_library()
    except RuntimeError as e:
        return str(e)
    return None


def cuda_available() -> bool:
    """True when decoding with ``device="cuda"`` works here."""
    return unavailable_reason() is None


def backend_info(device: Union[str, torch.device, int, None] = None) -> Dict[str, str]:
    """nvJPEG version, hardware decoder (engines, cores), allocators in use, and the library's path."""
    info = dict(load_library())
    raw = torch.ops.custom_op._gpu_backend_info(_device_index(device))
    for part in raw.split(";"):
        key, _, value = part.partition("=")
        info[key] = value
    return info


_TUNING_KEYS = ("parse_mode", "hardware_jobs", "gpu_percent", "gpu_min_items", "one_format")


def _set_tuning(**settings) -> Dict[str, int]:
    """How batches are shared out between nvJPEG's decoders (tests and benchmarks; process-wide).
    Keys: parse_mode (0: nvJPEG parses whole files to say what the JPEG engines take; 1: only their
    headers; 2: baseline files our header scan accepts are not asked about), hardware_jobs (1-4
    concurrent hardware calls per format), gpu_percent (share of the engines' items sent to the
    GPU-hybrid batched decoder instead, smallest images first), gpu_min_items (... only when that makes
    at least this many), one_format (1: every file the engines decode comes back as YCbCr planes, so
    a batch is one hardware call; 0: RGB for 4:4:4 and gray files). Unset keys stay as they are.
    Returns the settings before the call."""
    unknown = set(settings) - set(_TUNING_KEYS)
    if unknown:
        raise TypeError(f"unknown tuning keys {sorted(unknown)}; known: {_TUNING_KEYS}")
    load_library()
    values = [int(settings[k]) if settings.get(k) is not None else -1 for k in _TUNING_KEYS]
    before = torch.ops.custom_op._gpu_set_tuning(*values)
    return dict(zip(_TUNING_KEYS, before))


def _device_index(device) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device must be a CUDA device here, got {device!r}")
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _int_list(name: str, value, n: int) -> List[int]:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} entries for {n} images")
        return [_as_int(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return [_as_int(name, value)] * n


def _path_name(code: int) -> str:
    name = PATHS.get(code & ~_SEGMENTS, str(code))
    return name + "+segments" if code & _SEGMENTS else name


_EXCEPTIONS = {"V": ValueError, "T": TypeError, "R": RuntimeError}
_WARN = 1  # on_warning code of "warn"


def _exception(text: str) -> Exception:
    kind, _, message = text.partition(":")
    return _EXCEPTIONS.get(kind, RuntimeError)(message)


def _check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "return"):
        raise ValueError(f"on_error must be 'raise' or 'return', got {on_error!r}")


def _run(tensors, tops, lefts, heights, widths, mode, apply_exif_orientation, on_warning, max_pixels, device,
         stream, stack, return_errors, debug):
    """The operator on the right device and stream: (outputs, error texts, paths)."""
    load_library()
    index = _device_index(device)
    if stream is not None:
        if not isinstance(stream, torch.cuda.Stream):
            raise TypeError(f"stream must be a torch.cuda.Stream, got {type(stream).__name__}")
        if stream.device.index != index:
            raise ValueError(f"stream is on {stream.device}, the output device is cuda:{index}")
        with torch.cuda.stream(stream):
            return torch.ops.custom_op._decode_jpegs_cuda(
                tensors, tops, lefts, heights, widths, mode, apply_exif_orientation, on_warning, max_pixels,
                index, stack, return_errors, debug)
    with torch.cuda.device(index):
        return torch.ops.custom_op._decode_jpegs_cuda(
            tensors, tops, lefts, heights, widths, mode, apply_exif_orientation, on_warning, max_pixels, index,
            stack, return_errors, debug)


def _decode_one(data, top, left, height, width, mode, apply_exif_orientation, on_warning, max_pixels, device,
                stream, whole=False):
    """decode_and_crop_jpeg (or, with whole=True, decode_jpeg) with device="cuda"; decode.py has
    converted the arguments."""
    outputs, errors, _ = _run([data], [top], [left], [height], [width], mode, apply_exif_orientation, on_warning,
                              max_pixels, device, stream, False, False, _SINGLE | (_WHOLE if whole else 0))
    _warn(errors[0], None)
    return outputs[0]


def _warn(text: str, index: Optional[int]) -> bool:
    """Issues libjpeg's warnings for an item decoded with on_warning="warn"; True if there were some."""
    if not text.startswith("W:"):
        return False
    where = "" if index is None else f"batch item {index}: "
    warnings.warn(f"custom_op: {where}{text[2:]}", UserWarning, stacklevel=4)
    return True


def decode_and_crop_jpegs(data: Sequence, tops, lefts, heights, widths, *, mode=ImageReadMode.RGB,
                          apply_exif_orientation: bool = False, on_warning: str = "raise",
                          max_pixels: Optional[int] = DEFAULT_MAX_PIXELS, device: Union[str, torch.device] = "cuda",
                          stream: Optional["torch.cuda.Stream"] = None, stack: bool = False,
                          on_error: str = "raise", _debug: int = 0, _return_paths: bool = False):
    """Decodes one window of each JPEG in ``data``, in one call: the batched form of
    :func:`custom_op.decode_and_crop_jpeg` (which calls this when given a list).

    Args:
        data: a list of encoded files (each as :func:`custom_op.decode_and_crop_jpeg` takes one).
        tops, lefts, heights, widths: one int for all images, or one per image (list, tuple, 1-D
            tensor or array).
        mode, apply_exif_orientation, on_warning, max_pixels: as for one image, applied to all.
        device: ``"cuda"`` (the current CUDA device), ``"cuda:N"``, or ``"cpu"`` (a loop over the CPU
            path, for symmetry).
        stream: the CUDA stream the outputs are ordered on; default the current stream. The outputs
            are written by work queued on that stream, and are complete for any later work on it.
        stack: return one uint8 tensor ``[N, C, H, W]`` (all windows must have one size and, with
            mode=UNCHANGED, one channel count) instead of a list of ``[C, H, W]`` tensors.
        on_error: ``"raise"`` (default): the first bad item raises its exception, its message
            starting with ``batch item <index>:``. ``"return"``: bad items do not stop the batch; a
            list result holds the exception object in place of that item's tensor, and a stacked
            result comes back as ``(tensor, errors)``, where the bad item's slice is zeros and
            ``errors[i]`` is its exception (None for good items).
    """
    _check_on_error(on_error)
    if not isinstance(data, (list, tuple)):
        raise TypeError(f"data must be a list or tuple of encoded images, got {type(data).__name__}")
    n = len(data)
    tensors = []
    for i, d in enumerate(data):
        try:
            tensors.append(_as_tensor(d))
        except TypeError as e:
            raise TypeError(f"custom_op: batch item {i}: {e}") from None
    args = (_int_list("tops", tops, n), _int_list("lefts", lefts, n), _int_list("heights", heights, n),
            _int_list("widths", widths, n))
    mode_code = _mode_code(mode)
    limit = _pixel_limit(max_pixels)
    whole = bool(_debug & _WHOLE)
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        kind = None
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if n == 0:
        empty = torch.empty(0, dtype=torch.uint8, device=device)
        return (empty, []) if stack and on_error == "return" else empty if stack else []
    if kind == "cpu":
        if stream is not None:
            raise ValueError("stream applies to device='cuda' only")
        return _decode_on_cpu(tensors, *args, mode_code, bool(apply_exif_orientation), _warning_code(on_warning),
                              limit, stack, on_error, whole)
    outputs, errors, paths = _run(tensors, *args, mode_code, bool(apply_exif_orientation), _warning_code(on_warning),
                                  limit, device, stream, bool(stack), on_error == "return", int(_debug))
    result = _finish(list(outputs), list(errors), stack, on_error)
    return (result, [_path_name(p) for p in paths]) if _return_paths else result


def decode_jpegs(data: Sequence, **options):
    """Decodes each whole JPEG in ``data`` in one call (the batched :func:`custom_op.decode_jpeg`).
    Options as for :func:`decode_and_crop_jpegs` (stack needs images of one size)."""
    n = len(data) if isinstance(data, (list, tuple)) else 0
    options["_debug"] = options.get("_debug", 0) | _WHOLE
    return decode_and_crop_jpegs(data, [0] * n, [0] * n, [0] * n, [0] * n, **options)


def _finish(outputs, errors, stack, on_error):
    excs = [None if not e or _warn(e, i) else _exception(e) for i, e in enumerate(errors)]
    if stack:
        return (outputs[0], excs) if on_error == "return" else outputs[0]
    if on_error == "return":
        return [exc if exc is not None else out for out, exc in zip(outputs, excs)]
    return outputs


def _decode_on_cpu(tensors, tops, lefts, heights, widths, mode, exif, on_warning, limit, stack, on_error, whole):
    outputs, errors = [], []
    for i, data in enumerate(tensors):
        try:
            if on_warning == _WARN:
                if whole:
                    out, text = torch.ops.custom_op.decode_jpeg_with_warnings(data, mode, exif, limit)
                else:
                    out, text = torch.ops.custom_op.decode_and_crop_jpeg_with_warnings(
                        data, tops[i], lefts[i], heights[i], widths[i], mode, exif, limit)
                if text:
                    _warn("W:" + text, i)
            elif whole:
                out = torch.ops.custom_op.decode_jpeg(data, mode, exif, on_warning, limit)
            else:
                out = torch.ops.custom_op.decode_and_crop_jpeg(data, tops[i], lefts[i], heights[i], widths[i], mode,
                                                              exif, on_warning, limit)
            errors.append(None)
        except (ValueError, TypeError, RuntimeError) as e:
            wrapped = type(e)(f"custom_op: batch item {i}: {str(e).removeprefix('custom_op: ')}")
            if on_error == "raise":
                raise wrapped from e
            out = None
            errors.append(wrapped)
        outputs.append(out)
    if not stack:
        return [e if e is not None else o for o, e in zip(outputs, errors)]
    good = [o for o in outputs if o is not None]
    if good and any(o.shape != good[0].shape for o in good):
        raise ValueError("custom_op: stack=True needs one output shape; got "
                         + ", ".join(sorted({str(tuple(o.shape)) for o in good})))
    if not good:
        stacked = torch.empty(0, dtype=torch.uint8)
    else:
        stacked = torch.stack([o if o is not None else torch.zeros_like(good[0]) for o in outputs])
    return (stacked, errors) if on_error == "return" else stacked
