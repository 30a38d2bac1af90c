"""Decoding a batch of files in one call, on the CPU or on a GPU: list in, list (or one stacked
tensor) out.

On the CPU the items are decoded in parallel on torch's intra-op thread pool
(``torch.get_num_threads()`` threads) with the GIL released, so a main process can decode a whole
batch without DataLoader workers. With ``device="cuda"`` the batch goes to the GPU backend in one
call. Either way each item's pixels are those of :func:`custom_op.decode_and_crop_jpeg` on it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import NamedTuple, Optional, Union

import torch

from . import _args, _device, _outcomes
from ._args import DEFAULT_MAX_PIXELS, ImageReadMode
from .packed_files import PackedFiles

__all__ = ["decode_and_crop_jpegs", "decode_jpegs"]

IntOrInts = Union[int, Sequence[int], torch.Tensor]


def decode_and_crop_jpegs(
    data: Sequence,
    tops: IntOrInts,
    lefts: IntOrInts,
    heights: IntOrInts,
    widths: IntOrInts,
    *,
    mode: ImageReadMode = ImageReadMode.RGB,
    apply_exif_orientation: bool = False,
    on_warning: str = "raise",
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
    device: Union[str, torch.device] = "cpu",
    stream: Optional[torch.cuda.Stream] = None,
    stack: bool = False,
    on_error: str = "raise",
    check_entropy: bool = False,
    gpu_decoder: str = "auto",
):
    """Decodes one window of each JPEG in ``data``: the batched :func:`custom_op.decode_and_crop_jpeg`.

    Args:
        data: a list or tuple of encoded files, each as :func:`custom_op.decode_and_crop_jpeg` takes
            one, or a :class:`custom_op.PackedFiles` (:func:`custom_op.pack_files`: the files of a
            DataLoader batch in one tensor). A file may appear several times (several windows of one
            photo); the GPU backend then decodes it once.
        tops, lefts, heights, widths: one int for every file, or one per file (a list, tuple, 1-D
            tensor or array).
        mode, apply_exif_orientation, on_warning, max_pixels, check_entropy, gpu_decoder: as for one
            image, applied to all. With ``device="cuda"``, the check of ``check_entropy`` (which the
            default ``gpu_decoder`` applies to what it leaves to nvJPEG) checks every file on the
            CPU (on torch's intra-op thread pool) before nvJPEG gets it, and hands those it finds
            anything wrong with to the CPU path, with all their windows: each item's exception or
            pixels are then the CPU path's. See :func:`custom_op.decode_and_crop_jpeg`.
        device: ``"cpu"`` (default): the items are decoded in parallel on torch's intra-op thread
            pool (``torch.set_num_threads`` sets its size), the GIL released. ``"cuda"`` /
            ``"cuda:N"``: one call into the GPU backend; the results are CUDA tensors.
        stream: device="cuda" only: the CUDA stream the outputs are ordered on (default: the current
            stream). The outputs are written by work queued on that stream, and are complete for any
            later work on it.
        stack: return one uint8 tensor ``[N, C, H, W]`` (all windows of one size and, with
            mode=UNCHANGED, one channel count, else ValueError) instead of a list of ``[C, H, W]``
            tensors. An empty ``data`` gives ``[0, C, h, w]`` where that shape is known: ``heights`` and
            ``widths`` one int each, and mode RGB or GRAY. Otherwise (per-file lists, mode=UNCHANGED)
            nothing says its shape, and it raises ValueError.
        on_error: ``"raise"`` (default): a bad item raises its exception (the first by index),
            the message starting ``custom_op: batch item <index>:``. ``"return"``: bad items do not
            stop the batch: a list result holds the exception object in place of that item's tensor,
            and a stacked result comes back as ``(tensor, errors)``, where the bad item's slice is
            zeros and ``errors[i]`` is its exception (None for good items).

    Returns:
        A list of uint8 tensors ``[C, h, w]`` on ``device``, or with ``stack=True`` one tensor
        ``[N, C, H, W]`` (with ``on_error="return"``: ``(tensor, errors)``). With ``device="cuda"``
        and mode RGB or GRAY, the list's tensors are views of one allocation, as ``torch.unbind``'s
        results are: its memory is freed with the last of them, and ``torch.save`` of one writes the
        whole allocation (``clone()`` a window kept on its own).

    Raises:
        TypeError: ``data`` is not a list or tuple of bytes-like files or a PackedFiles (or the
            PackedFiles' tensors are not what :meth:`custom_op.PackedFiles.unpack` takes), or an
            argument has the wrong type; with ``on_error="raise"``, also a bad item's TypeError. (A tensor that is
            not 1-D, contiguous, uint8 and on the CPU is a bad item with ``device="cuda"``, returned
            in its place with ``on_error="return"``; on the CPU it fails the whole call.)
        ValueError: the window lists do not have one entry per file, a window size is below 1, a
            PackedFiles' sizes do not add up to its data, an
            option has an unknown value, or ``stack=True`` with outputs of different shapes or on an
            empty batch whose shape is unknown; with ``on_error="raise"``, also a bad item's
            ValueError (a window outside its image, ...).
        RuntimeError: with ``on_error="raise"``, an item that cannot be decoded. Every item's
            exception is the one :func:`custom_op.decode_and_crop_jpeg` raises for it, its message
            naming the item.
    """
    tensors = _files(data, device)
    windows = _windows(tops, lefts, heights, widths, len(tensors))
    if tensors and min(min(windows[2]), min(windows[3])) < 1:
        for i, (h, w) in enumerate(zip(windows[2], windows[3])):
            _args.size_check(h, w, where=f"batch item {i}: ")
    call = _batch_call(
        mode,
        apply_exif_orientation,
        on_warning,
        max_pixels,
        device,
        stream,
        stack,
        on_error,
        check_entropy,
        gpu_decoder,
    )
    return _decode(tensors, windows, call, sizes=(heights, widths))


def decode_jpegs(
    data: Sequence,
    *,
    mode: ImageReadMode = ImageReadMode.RGB,
    apply_exif_orientation: bool = False,
    on_warning: str = "raise",
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
    device: Union[str, torch.device] = "cpu",
    stream: Optional[torch.cuda.Stream] = None,
    stack: bool = False,
    on_error: str = "raise",
    check_entropy: bool = False,
    gpu_decoder: str = "auto",
):
    """Decodes each whole JPEG in ``data``: the batched :func:`custom_op.decode_jpeg`.

    The arguments mean what they mean for :func:`decode_and_crop_jpegs` (``data`` may be a
    :class:`custom_op.PackedFiles` too); ``stack=True`` needs
    images of one size (and, with ``apply_exif_orientation``, one displayed orientation of it), and
    raises ValueError on an empty batch, whose images have no size.
    """
    tensors = _files(data, device)
    call = _batch_call(
        mode,
        apply_exif_orientation,
        on_warning,
        max_pixels,
        device,
        stream,
        stack,
        on_error,
        check_entropy,
        gpu_decoder,
    )
    return _decode(tensors, None, call)


def decode_with_paths(
    data: Sequence, tops: IntOrInts, lefts: IntOrInts, heights: IntOrInts, widths: IntOrInts, **options
):
    """:func:`decode_and_crop_jpegs` and the path code of each item (which decoder took it: see
    custom_op.gpu.PATH_NAMES). For tests and benchmarks; custom_op.testing wraps it."""
    unknown = set(options) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"decode_with_paths() got unexpected keyword arguments {sorted(unknown)}")
    call = _batch_call(**{**_DEFAULTS, **options})
    tensors = _files(data, call.placement.device)
    windows = _windows(tops, lefts, heights, widths, len(tensors))
    return _decode(tensors, windows, call, sizes=(heights, widths), with_paths=True)


def _files(data, device) -> list[torch.Tensor]:
    """The batch's files as tensors. The CUDA operator checks each tensor itself (a bad one is that
    item's TypeError, as on the CPU), so for device="cuda" a list of tensors is passed on unchecked;
    the CPU operator is dispatched on its tensors' device, so there every file is checked first. A
    PackedFiles gives views of its one tensor, which unpack() has checked."""
    if isinstance(data, PackedFiles):
        return list(data.unpack())
    return _args.tensors(data, check_tensors=_args.device(device).type != "cuda")


def _windows(tops, lefts, heights, widths, n: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """The window arguments of a batch of n files as one list of ints each."""
    return (
        _args.int_list("tops", tops, n),
        _args.int_list("lefts", lefts, n),
        _args.int_list("heights", heights, n),
        _args.int_list("widths", widths, n),
    )


class _BatchCall(NamedTuple):
    """A batched call's options, checked."""

    options: _args.DecodeOptions
    placement: _device.Placement
    stack: bool
    on_error: str


def _batch_call(
    mode, apply_exif_orientation, on_warning, max_pixels, device, stream, stack, on_error, check_entropy, gpu_decoder
) -> _BatchCall:
    return _BatchCall(
        _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels),
        _device.placement(device, stream, check_entropy, gpu_decoder),
        bool(stack),
        _args.on_error_check(on_error),
    )


#: decode_and_crop_jpegs' options and their defaults (what decode_with_paths takes).
_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(decode_and_crop_jpegs).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
}


def _one_int(name: str, value) -> Optional[int]:
    """The int a window argument gives every file, or None when it gives one per file (a sequence)."""
    value = _args.per_image(value)
    return None if isinstance(value, (list, tuple)) else _args.as_int(name, value)


def _empty_stack(call: _BatchCall, sizes) -> torch.Tensor:
    """The stacked result of an empty batch, from its ``(heights, widths)`` arguments (None for whole
    images): ``[0, C, h, w]`` where one int gives every window's size and the mode its channel count;
    otherwise nothing gives its shape, and ValueError says so. Decided here, before any operator, so
    that every device answers alike (the operators, and their fake kernels, return a [0] tensor)."""
    if sizes is not None:
        sizes = (_one_int("heights", sizes[0]), _one_int("widths", sizes[1]))
    channels = _args.MODE_CHANNELS.get(call.options.mode)
    if sizes is None:
        why = "whole images take their size from their files"
    elif None in sizes:
        why = "heights and widths are given per file (one int each would give the size)"
    elif channels is None:
        why = "mode=UNCHANGED takes the channel count from the files"
    else:
        _args.size_check(*sizes)
        return torch.empty((0, channels, *sizes), dtype=torch.uint8, device=call.placement.device)
    raise ValueError(
        f"custom_op: stack=True on an empty batch: {why}, so the shape of its [0, C, H, W] tensor is "
        "unknown; check for an empty batch first, or pass stack=False (an empty list)"
    )


def _decode(tensors: list[torch.Tensor], windows, call: _BatchCall, sizes=None, with_paths: bool = False):
    """The batch's results. ``sizes``: the call's ``(heights, widths)`` as given, None for whole images."""
    stack, on_error = call.stack, call.on_error
    if not tensors:
        result = _empty_stack(call, sizes) if stack else []
        if stack and on_error == "return":
            result = (result, [])
        return (result, []) if with_paths else result
    try:
        run = _device.run(tensors, windows, call.options, call.placement, stack=stack)
    except RuntimeError:
        # A file the operator cannot even be called with (a meta tensor dispatches to the operators'
        # fake kernels), passed on unchecked (_files): the TypeError that names it instead.
        _args.tensors(tensors)
        raise
    errors = _outcomes.settle(run.statuses, run.messages, stacklevel=5)
    if on_error == "raise":
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
    if stack:
        result = (run.images[0], errors) if on_error == "return" else run.images[0]
    elif on_error == "return":
        result = [error if error is not None else image for image, error in zip(run.images, errors)]
    else:
        result = run.images
    return (result, run.paths) if with_paths else result
