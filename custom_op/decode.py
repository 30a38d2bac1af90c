"""Decoding one image: a window of it, all of it, or its header.

The work happens in the C++ operators ``torch.ops.custom_op.*`` (csrc/); these functions convert what
users pass (_args.py), pick the device (_device.py) and document every option. Batches have their own
functions (batch.py), which decode on the CPU in parallel or on the GPU in one call.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch

from . import _args, _device, _outcomes
from ._args import DEFAULT_MAX_PIXELS, Data, ImageReadMode

__all__ = ["decode_and_crop_jpeg", "decode_jpeg", "read_jpeg_header", "JpegInfo"]


class JpegInfo(NamedTuple):
    """What the header says, read without decoding any pixel (see :func:`read_jpeg_header`)."""

    height: int  #: The image's height in pixels (displayed frame with ``apply_exif_orientation=True``).
    width: int  #: The image's width in pixels (displayed frame with ``apply_exif_orientation=True``).
    channels: int  #: Components in the file, 1 (gray), 3 (YCbCr or RGB) or 4 (CMYK or YCCK).
    #: One of ``"gray"``, ``"ycbcr"``, ``"rgb"``, ``"cmyk"``, ``"ycck"`` or ``"unknown"``.
    color_space: str
    #: One of ``"4:4:4"``, ``"4:2:2"``, ``"4:2:0"``, ``"4:4:0"``, ``"4:1:1"``, ``"4:1:0"``, ``"gray"`` or
    #: ``"other"``.
    subsampling: str
    progressive: bool  #: True for a progressive JPEG (all of it is read before the first row comes out).
    orientation: int  #: The EXIF orientation, 1 (none) to 8, whatever ``apply_exif_orientation`` says.
    #: True when the header declares a random-access layout (:func:`custom_op.prepare_jpeg` writes one),
    #: sequential Huffman coding, all components in one scan, a restart interval of at most the MCUs per
    #: row (a marker at least once per MCU row). :func:`custom_op.decode_and_crop_jpeg` then decodes
    #: only the restart segments holding the window (after checking the markers; other files, and files
    #: whose markers do not match, take the ordinary path).
    random_access: bool = False


_COLOR_SPACES = {0: "unknown", 1: "gray", 2: "rgb", 3: "ycbcr", 4: "cmyk", 5: "ycck"}
_SUBSAMPLING = {(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0", (1, 2): "4:4:0", (4, 1): "4:1:1", (4, 2): "4:1:0"}


def _decode_one(data, window, batched: str, options: _args.DecodeOptions, placement: _device.Placement) -> torch.Tensor:
    """The work of decode_and_crop_jpeg (``window``: its top, left, height, width) and of decode_jpeg
    (``window`` None), on the CPU or a CUDA device. ``batched`` names the call a list belongs to."""
    _not_a_list(data, batched)
    tensor = _args.as_tensor(data)
    if window is not None:
        window = _args.window(*window)
    if placement.device.type == "cuda":
        # The batched operator with one item, its outcome worded as a single call's.
        windows = None if window is None else [[v] for v in window]
        run = _device.run([tensor], windows, options, placement, stack=False)
        (error,) = _outcomes.settle(run.statuses, run.messages, single=True, stacklevel=5)
        if error is not None:
            raise error
        return run.images[0]
    if window is None:
        image, warnings = _outcomes.call(torch.ops.custom_op.decode_jpeg, tensor, **options.op_kwargs())
    else:
        image, warnings = _outcomes.call(
            torch.ops.custom_op.decode_and_crop_jpeg, tensor, *window, **options.op_kwargs()
        )
    if options.warns:
        _outcomes.warn_text(warnings, stacklevel=4)
    return image


def _not_a_list(data, batched: str) -> None:
    if isinstance(data, (list, tuple)):
        raise TypeError(
            f"custom_op: this function decodes one image; for a list of files use "
            f"custom_op.{batched}(...) (list in, list or one stacked tensor out)"
        )


def decode_and_crop_jpeg(
    data: Data,
    top: int,
    left: int,
    height: int,
    width: int,
    *,
    mode: ImageReadMode = ImageReadMode.RGB,
    apply_exif_orientation: bool = False,
    on_warning: str = "raise",
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
    device: Union[str, torch.device] = "cpu",
    stream=None,
    check_entropy: bool = False,
    gpu_decoder: str = "auto",
) -> torch.Tensor:
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
            checked: corruption below the window goes unnoticed. With ``device="cuda"`` this holds
            for every item under the default ``gpu_decoder``. With ``gpu_decoder="nvjpeg"`` it holds
            for the files the GPU backend hands to the CPU path (formats nvJPEG does not get, files
            without an end-of-image marker in their last 64 bytes, markers before the first scan
            that the backend's own header scan does not fully understand, files nvJPEG fails on),
            but not for the files nvJPEG decodes, since nvJPEG reports no damage: a file whose
            entropy-coded data is damaged (a bad Huffman code, a missing or misnumbered restart
            marker, stray bytes, data cut short and then closed with an end-of-image marker), or
            whose headers libjpeg warns about or refuses (an unknown JFIF revision, a bad Huffman
            table, a scan header naming an unknown component), may then decode with no warning and
            no error, whatever ``on_warning``, to other pixels than the CPU path's.
            ``check_entropy=True`` gives such files the CPU path's outcome there too.
        max_pixels: refuse (ValueError) files whose header declares more than this many pixels,
            before allocating anything for them. ``None`` disables the check.
        device: ``"cpu"`` (default) or ``"cuda"`` / ``"cuda:N"``: decode with the GPU backend
            (custom_op's own CUDA decoder, or nvJPEG: see ``gpu_decoder``) and return a CUDA tensor
            with the same pixels as the CPU path (for damaged files, see ``on_warning``). Files the
            GPU decoders cannot take (CMYK, arithmetic coding, progressive files under the default
            ``gpu_decoder``, ...) are decoded by the CPU path and copied over. See the GPU backend
            guide.
        stream: device="cuda" only: the torch.cuda.Stream the output is ordered on (default: the
            current stream).
        check_entropy: True or False (default). With ``device="cuda"``, True checks each file on the CPU
            before nvJPEG gets it (the default ``gpu_decoder`` checks every file it leaves to nvJPEG anyway;
            the option matters with ``gpu_decoder="nvjpeg"``): libjpeg reads its headers and sets the decode
            up, and the library's own Huffman decoder walks all of its entropy-coded data, to the
            end-of-image marker, decoding no pixel. The CPU path decodes instead every file in which the
            check finds anything wrong (a libjpeg warning or error, a code missing from its Huffman table, a
            restart marker missing, misnumbered or after stray bytes, fill bytes, data that ends inside the
            scan or is followed by anything but the end-of-image marker), and every file the walk does not
            take (progressive, arithmetic-coded, several scans): their exceptions, warnings and pixels are
            then the CPU path's, under every ``on_warning``. Files that pass go to nvJPEG as without the
            check. Damage that leaves a valid scan (a coefficient's value changed) is invisible to libjpeg
            and to the check alike, and gives no warning on either path (nvJPEG's pixels may then differ
            from libjpeg's). The check costs host CPU time in proportion to each file's size
            (``bench/bench_gpu_check.py`` measures it). Files our CUDA decoder takes need no check. With
            ``device="cpu"`` the option is accepted and changes nothing: the CPU path gives libjpeg's
            outcome already.
        gpu_decoder: with ``device="cuda"``, which GPU decoder takes the baseline files both can. ``"auto"``
            (default), the library's choice, is ``"cuda"`` on every GPU: our decoder is exact and, from
            batches of 64 up, faster than the JPEG engines (the GPU backend guide gives the figures, and
            says when ``"nvjpeg"`` is faster: a few files per call). ``"cuda"``: custom_op's own CUDA
            decoder every baseline file it takes, with or without restart markers (those without are decoded
            in parallel chunks, no prepare step), and nvJPEG a file it does not take only once the
            ``check_entropy`` check passes it (progressive files go to the CPU path): every item gets the
            CPU path's outcome and pixels, damaged ones included. ``"nvjpeg"``: nvJPEG every file it takes
            (the JPEG engines where the GPU has them, else its hybrid decoders), prepared files too.
            Whatever the choice, files neither decoder takes go to the CPU path. With ``device="cpu"`` the
            option is checked and changes nothing.

    Returns:
        A contiguous uint8 tensor of shape ``[C, height, width]`` (C from ``mode``), on ``device``.

    Raises:
        TypeError: ``data`` is not bytes-like or not a 1-D contiguous uint8 CPU tensor/array (a list
            of files goes to :func:`custom_op.decode_and_crop_jpegs`), a window argument is not an
            integer, or ``check_entropy`` is not True or False.
        ValueError: the window's height or width is below 1, the window does not fit in the image
            (the message gives both), the header exceeds ``max_pixels``, or an option has an unknown
            value.
        RuntimeError: the data is not a JPEG libjpeg-turbo can decode (corrupt, truncated, empty,
            12-bit, ...), with libjpeg's message.
    """
    options = _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels)
    placement = _device.placement(device, stream, check_entropy, gpu_decoder)
    return _decode_one(data, (top, left, height, width), "decode_and_crop_jpegs", options, placement)


def decode_jpeg(
    data: Data,
    *,
    mode: ImageReadMode = ImageReadMode.RGB,
    apply_exif_orientation: bool = False,
    on_warning: str = "raise",
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
    device: Union[str, torch.device] = "cpu",
    stream=None,
    check_entropy: bool = False,
    gpu_decoder: str = "auto",
) -> torch.Tensor:
    """Decodes a whole JPEG into a uint8 tensor ``[C, H, W]``.

    The options mean the same as in :func:`decode_and_crop_jpeg`; with ``apply_exif_orientation``,
    H and W are the displayed height and width. Lists of files go to :func:`custom_op.decode_jpegs`.
    """
    options = _args.decode_options(mode, apply_exif_orientation, on_warning, max_pixels)
    placement = _device.placement(device, stream, check_entropy, gpu_decoder)
    return _decode_one(data, None, "decode_jpegs", options, placement)


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
    header = _outcomes.call(
        torch.ops.custom_op.read_jpeg_header, _args.as_tensor(data), apply_exif_orientation=bool(apply_exif_orientation)
    )
    height, width, channels, color_space, progressive, _arithmetic, orientation, sampling, random_access = header
    return JpegInfo(
        height,
        width,
        channels,
        _COLOR_SPACES.get(color_space, "unknown"),
        _subsampling(channels, list(sampling)),
        bool(progressive),
        orientation,
        bool(random_access),
    )
