"""Hooks for tests and benchmarks: which path decoded what, and switches that force one. Not for
normal use: they change process-wide settings, and their names and effects may change. For example::

    from custom_op import testing

    with testing.gpu_options(force_path="cpu", dedupe=False):
        images, paths = testing.decode_with_paths(files, tops, lefts, 224, 224, device="cuda")
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Optional

import torch

from . import _args, _outcomes, batch, gpu

__all__ = [
    "check_entropy_data",
    "cuda_decoder_fallbacks",
    "cuda_decoder_retries",
    "decode_with_paths",
    "entropy_decoder_give_ups",
    "gpu_options",
    "own_entropy_decoder",
    "path_name",
    "random_access_decodes",
]

_PATH_CODES = {name: code for code, name in gpu.PATH_NAMES.items()}
_SEGMENTS = {"auto": 0, "always": 1, "never": 2}


class _ProcessSetting:
    """A process-wide setting that ``with`` blocks hold. Blocks on several threads at once that ask for the
    same value share it, and it goes back when the last of them ends, in whatever order they end (a
    decode function entering the block on each of ``decode_ahead``'s threads, say). A block that asks for
    another value while another thread holds the setting raises: both cannot hold at once. One thread's
    nested blocks may ask for other values; they undo in turn."""

    def __init__(self, what: str, apply: Callable[[Hashable], Hashable]):
        self._what = what
        self._apply = apply  # sets a value, returns the one before
        self._lock = threading.Lock()
        # (value, value before, holders: thread id -> blocks), innermost last. Past the first entry, every
        # entry is one thread's (see hold), so the entry whose last block ends is always the innermost.
        self._held: list[tuple[Hashable, Hashable, collections.Counter]] = []

    @contextlib.contextmanager
    def hold(self, value: Hashable, shown: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._lock:
            top = self._held[-1] if self._held else None
            others = top is not None and any(t != me for t in top[2])
            if top is not None and top[0] == value and (not others or len(self._held) == 1):
                entry = top
            elif others:
                raise RuntimeError(
                    f"{self._what}({shown}) was entered while another thread holds it with other settings; "
                    "its settings are process-wide, so threads that decode at once must use the same ones "
                    "(or one block around them all)"
                )
            else:
                entry = (value, self._apply(value), collections.Counter())
                self._held.append(entry)
            entry[2][me] += 1
        try:
            yield
        finally:
            with self._lock:
                entry[2][me] -= 1
                if entry[2][me] == 0:
                    del entry[2][me]
                if not entry[2]:
                    self._held.pop()
                    self._apply(entry[1])


def _apply_gpu_testing(codes: Hashable) -> Hashable:
    """Sets the GPU backend's testing options, (force_path, no_margin, no_dedupe, segments, chunk_bytes,
    hide_engines, window_bytes) as the operator takes them; returns the ones before, in the same form."""
    force_path, no_margin, no_dedupe, segments, chunk_bytes, hide_engines, window_bytes = codes
    before = _outcomes.call(
        torch.ops.custom_op._set_gpu_testing,
        force_path=force_path,
        no_margin=no_margin,
        no_dedupe=no_dedupe,
        segments=segments,
        chunk_bytes=chunk_bytes,
        hide_engines=hide_engines,
        window_bytes=window_bytes,
    )
    return (before[0], bool(before[1]), bool(before[2]), before[3], before[4], bool(before[5]), before[6])


def _apply_own_entropy_decoder(on: Hashable) -> Hashable:
    return bool(torch.ops.custom_op._set_own_entropy_decoder(bool(on)))


_gpu_testing = _ProcessSetting("testing.gpu_options", _apply_gpu_testing)
_entropy_decoder = _ProcessSetting("testing.own_entropy_decoder", _apply_own_entropy_decoder)


def path_name(code: int) -> str:
    """The name of a path code: "hardware-roi", ..., "cpu", with "+segments" when nvJPEG decoded the
    sub-image of a prepared file's restart segments."""
    name = gpu.PATH_NAMES.get(code & ~gpu.SEGMENTS_FLAG, str(code))
    return name + "+segments" if code >= 0 and code & gpu.SEGMENTS_FLAG else name


def decode_with_paths(data: Sequence, tops, lefts, heights, widths, **options) -> tuple[object, list[str]]:
    """custom_op.decode_and_crop_jpegs(...) and the name of the path that decoded each item."""
    result, codes = batch.decode_with_paths(data, tops, lefts, heights, widths, **options)
    return result, [path_name(c) for c in codes]


@contextlib.contextmanager
def gpu_options(
    force_path: Optional[str] = None,
    margin: bool = True,
    dedupe: bool = True,
    segments: str = "auto",
    chunk_bytes: Optional[int] = None,
    engines: bool = True,
    window_bytes: Optional[int] = None,
) -> Iterator[None]:
    """For the block, in this process: every item the GPU decoders can take goes to ``force_path``
    ("cuda": our own CUDA decoder, which then also decodes files without short restart segments, in
    chunks, and the CPU path what it does not take; "hardware-roi": nvJPEG's
    usual choices without our decoder; "hardware-full", "gpu-hybrid", "hybrid" or "cpu"; an
    unavailable decoder passes its items on as usual); ``margin=False`` decodes exactly the window (no
    context for chroma upsampling: shows what the margin is for); ``dedupe=False`` decodes a repeated file once per
    window; ``segments`` "always" / "never" gives nvJPEG the sub-image of a prepared file's restart
    segments whatever the image's size / never ("auto": by size); ``chunk_bytes`` is the chunk size of
    the files our CUDA decoder decodes in chunks (None: its own; small chunks put chunk boundaries all
    over a small test image); ``engines=False`` makes the backend act as on a GPU without JPEG engines
    (they take nothing; nvJPEG's hybrid decoders take what nvJPEG gets); ``window_bytes`` is how many of
    the scan's bytes a window's first try takes in a file our CUDA decoder decodes in chunks, whatever its
    size (None: its own estimate, in scans of 512 KB or more; a few bytes make every such window fall short,
    and be decoded again with the whole file). Loads the GPU library.

    The options are the process's: blocks on several threads at once (a decode function under
    ``decode_ahead``, say) share them when they ask for the same ones, and they come back when the last
    of those blocks ends; asking for other options while another thread holds some raises RuntimeError."""
    if force_path is not None and force_path not in _PATH_CODES or force_path == "failed":
        raise ValueError(
            f"force_path must be None or one of {sorted(set(_PATH_CODES) - {'failed'})}, got {force_path!r}"
        )
    if segments not in _SEGMENTS:
        raise ValueError(f"segments must be one of {list(_SEGMENTS)}, got {segments!r}")
    if chunk_bytes is not None and (not isinstance(chunk_bytes, int) or not 1 <= chunk_bytes <= 1 << 20):
        raise ValueError(f"chunk_bytes must be None or an int from 1 to 2**20, got {chunk_bytes!r}")
    if window_bytes is not None and (not isinstance(window_bytes, int) or window_bytes < 1):
        raise ValueError(f"window_bytes must be None or an int of at least 1, got {window_bytes!r}")
    if not isinstance(engines, bool):
        raise ValueError(f"engines must be True or False, got {engines!r}")
    gpu.load_library()
    forced = -1 if force_path is None else _PATH_CODES[force_path]
    codes = (forced, not margin, not dedupe, _SEGMENTS[segments], chunk_bytes or 0, not engines, window_bytes or 0)
    shown = (
        f"force_path={force_path!r}, margin={margin}, dedupe={dedupe}, segments={segments!r}, "
        f"chunk_bytes={chunk_bytes}, engines={engines}, window_bytes={window_bytes}"
    )
    with _gpu_testing.hold(codes, shown):
        yield


# What check_entropy_data finds in a file, by the operator's code (csrc/ops.cpp).
_ENTROPY_CHECK_NAMES = {0: "ok", 1: "refused", 2: "not walked", 3: "damaged"}


def check_entropy_data(data: Sequence) -> list[str]:
    """The check that ``check_entropy=True`` runs on each file before nvJPEG gets it, on its own: per
    file, "ok" (libjpeg reads the headers without a warning and our Huffman decoder walks the whole
    scan to the end-of-image marker), "refused" (libjpeg warns or raises while setting the decode up),
    "not walked" (a progressive, arithmetic-coded or multi-scan file) or "damaged" (the walk met what a
    valid scan does not hold). Anything but "ok" sends the file to the CPU path. On the CPU, in
    parallel on torch's intra-op thread pool."""
    codes = _outcomes.call(torch.ops.custom_op._check_entropy_data, _args.tensors(data))
    return [_ENTROPY_CHECK_NAMES.get(c, str(c)) for c in codes]


def random_access_decodes() -> int:
    """How many windows this process has decoded through restart segments (the CPU random-access
    path); it only ever grows."""
    return int(torch.ops.custom_op._random_access_decodes())


@contextlib.contextmanager
def own_entropy_decoder(on: bool) -> Iterator[None]:
    """Our baseline Huffman decoder in libjpeg's place (the default) or libjpeg's own, for the block. Process-wide,
    shared and checked across threads as ``gpu_options`` is."""
    with _entropy_decoder.hold(bool(on), f"on={bool(on)}"):
        yield


def cuda_decoder_fallbacks() -> int:
    """Items our own CUDA decoder took and then gave to the CPU path (it found something libjpeg
    warns about or decodes differently) in this process; it only ever grows. Loads the GPU library."""
    gpu.load_library()
    return int(torch.ops.custom_op._cuda_decoder_fallbacks())


def cuda_decoder_retries() -> int:
    """Windows our own CUDA decoder decoded again with the whole file, in this process, because the first
    bytes of a large scan it took for them first fell short of their rows; it only ever grows. Loads the
    GPU library."""
    gpu.load_library()
    return int(torch.ops.custom_op._cuda_decoder_retries())


def entropy_decoder_give_ups() -> int:
    """Scans our entropy decoder gave back to libjpeg's (damaged data) in this process."""
    return int(torch.ops.custom_op._entropy_decoder_give_ups())
