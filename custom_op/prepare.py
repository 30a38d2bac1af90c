"""prepare_jpeg: rewrite a JPEG losslessly into a layout whose windows decode in proportion to their size.

An ordinary JPEG is one stream of Huffman codes: to decode a window, everything above it and everything
beside it in its rows must be entropy-decoded first, and that is most of a decode's time. A restart
marker resets the decoder's state, so when the file has one every few MCUs, the segments holding a
window's MCUs decode on their own. ``decode_and_crop_jpeg`` notices such a layout by itself
(``read_jpeg_header(data).random_access``) and reads only those segments; other files take the
ordinary path. Short segments serve custom_op's CUDA decoder too, which Huffman-decodes one segment
per GPU thread and so takes as long as the longest segment.

``prepare_jpeg`` produces that layout through libjpeg-turbo's coefficient API: the quantized DCT
coefficients and the quantization tables are copied unchanged (so every decoder gives exactly the same
pixels as from the original), and only the entropy coding is rewritten: one sequential (baseline) scan
with all components interleaved, optimized Huffman tables, and the restart interval. Progressive and
arithmetic-coded inputs come out as baseline Huffman files. The result is a standard JPEG.

Folders: ``python -m custom_op prepare SRC DST`` (custom_op/prepare_folder.py).
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _outcomes
from ._args import DEFAULT_MAX_PIXELS, Data, as_int, as_tensor, pixel_limit

__all__ = ["DEFAULT_MAX_GROWTH", "DEFAULT_MAX_SEGMENT_BYTES", "prepare_jpeg"]

#: The size budget of the restart interval's choice with ``restart_mcus=None``, as a fraction of the
#: input's size by which the file may grow (see :func:`custom_op.prepare_jpeg`).
DEFAULT_MAX_GROWTH = 0.02

#: The bound on every restart segment's entropy-coded data, in bytes, of the restart interval's choice
#: with ``restart_mcus=None`` (see :func:`custom_op.prepare_jpeg`). Our CUDA decoder gives each segment
#: a thread, which decodes about 2 bytes per microsecond, and a launch lasts as long as its longest
#: segment: the bound caps that, for about 0.4% more bytes than a bound of 2 KB on ImageNet photos.
DEFAULT_MAX_SEGMENT_BYTES = 400


def prepare_jpeg(
    data: Data,
    *,
    restart_mcus: Optional[int] = None,
    max_growth: float = DEFAULT_MAX_GROWTH,
    max_segment_bytes: Optional[int] = DEFAULT_MAX_SEGMENT_BYTES,
    keep_exif: bool = True,
    keep_icc: bool = True,
    optimize: bool = True,
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
) -> bytes:
    """Rewrites a JPEG losslessly for random-access decoding; returns the new file's bytes.

    Args:
        data: the JPEG's bytes (any input ``decode_jpeg`` takes).
        restart_mcus: the restart interval, in MCUs (an MCU is 8x8 pixels for 4:4:4 and grayscale,
            16x16 for 4:2:0, 16x8 for 4:2:2): a restart marker every ``restart_mcus`` MCUs, counted
            across rows, so that a segment may run from the end of one MCU row into the next. Values
            above the MCUs per row give one segment per row. 1 gives the finest random access and the
            largest file. ``None`` (default) chooses per file, see ``max_growth`` and
            ``max_segment_bytes``.
        max_growth: with ``restart_mcus=None``, the interval is chosen among those whose file is at
            most this fraction larger than the input (default 0.02, 2%), or than the coarsest layout
            (one segment per MCU row) when that one is already larger, as it is for most progressive
            inputs: the one that decodes windows fastest, with segments closest to about 13 pixels
            wide (narrower ones gain nothing; wider ones decode more columns beside the window), and
            preferably dividing the MCUs per row. Each restart marker costs about 4 bytes, so
            detailed photos get shorter segments than flat ones. The segment index (below) counts
            in the budget. On the ImageNet sample the files grow by about 2.1% in all.
        max_segment_bytes: with ``restart_mcus=None``, no restart segment holds more than this many
            bytes of entropy-coded data (default 400; ``None``: no bound). The GPU decoder takes as
            long as the longest segment it decodes. This bound comes before ``max_growth``: when no
            interval within it fits the size budget, the coarsest one within it is used, and the file
            grows by more than ``max_growth`` (a marker every 400 bytes costs about 1%, so files with
            detailed rows among flat ones get there: 76 of the 200 ImageNet sample photos grow by
            more than 2.5%, and all of them by 2.1%). When a single MCU is longer than the bound,
            every MCU gets a segment of its own.
        keep_exif: copy the APP1 segments (EXIF, with its orientation, and XMP). Default True.
        keep_icc: copy the ICC profile (APP2 ``ICC_PROFILE``). Default True. Other APPn and COM
            segments are dropped; the JFIF / Adobe segments are rewritten by libjpeg.
        optimize: optimized Huffman tables (default True); they pay for most of the markers.
        max_pixels: refuse (ValueError) files declaring more pixels than this; ``None``: no limit.
            The whole image's coefficients are held in memory (2 bytes per sample).

    The file also carries a segment index, an APP9 segment (``custom_op.index``) saying where each
    MCU row's restart segments end: 37 bytes and 4 per MCU row. custom_op's CUDA decoder uploads a
    file only as far as a window needs by it, and still checks every restart marker it uses, so an
    index that lies costs time (the file goes to the CPU path), never pixels; other decoders skip it.

    Raises:
        TypeError: ``data`` is not bytes-like.
        ValueError: bad option, or the header exceeds ``max_pixels``.
        RuntimeError: the data is not a JPEG libjpeg-turbo can transcode, or is corrupt: every libjpeg
            warning (premature end, bad Huffman code, extraneous bytes, ...) is an error here, so a
            damaged file is never written out as a clean-looking one. Progressive files whose scans
            are incomplete are refused too: libjpeg decodes them with block smoothing, which a
            sequential copy would not get.
    """
    if restart_mcus is None:
        interval = 0
    else:
        interval = as_int("restart_mcus", restart_mcus)
        if not 1 <= interval <= 65535:
            raise ValueError(f"restart_mcus must be in 1..65535 or None, got {restart_mcus}")
    try:
        growth = float(max_growth)
    except (TypeError, ValueError):
        raise TypeError(f"max_growth must be a number, got {type(max_growth).__name__}") from None
    if not 0.0 <= growth <= 10.0:
        raise ValueError(f"max_growth must be in [0, 10], got {max_growth}")
    if max_segment_bytes is None:
        segment_bound = 0
    else:
        segment_bound = as_int("max_segment_bytes", max_segment_bytes)
        if segment_bound < 1:
            raise ValueError(f"max_segment_bytes must be at least 1 or None, got {max_segment_bytes}")
    out = _outcomes.call(
        torch.ops.custom_op.prepare_jpeg,
        as_tensor(data),
        restart_mcus=interval,
        keep_exif=bool(keep_exif),
        keep_icc=bool(keep_icc),
        optimize=bool(optimize),
        max_pixels=pixel_limit(max_pixels),
        max_growth=growth,
        max_segment_bytes=segment_bound,
    )
    return out.numpy().tobytes()
