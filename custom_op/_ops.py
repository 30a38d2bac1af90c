"""The fake (meta) kernels of the operators, so that torch.compile and FakeTensor tracing know their
outputs. The schemas are in csrc/ops.cpp; every operator exists once the CPU library is loaded (the
GPU operators too: only their kernels wait for the GPU library), so all are registered then, once.

The operators' options are keyword-only; a fake kernel names those its outputs depend on and takes
the others as ``**_options``, so that a new option needs no change here unless it changes a shape.

Sizes that depend on the file's contents (the image size for whole images, the channel count for
UNCHANGED, the length of a rewritten file) are dynamic.
"""

import torch

from ._args import MODE_CHANNELS, ON_WARNING, ImageReadMode


def _channels(mode: int):
    channels = MODE_CHANNELS.get(mode)
    return channels if channels is not None else torch.library.get_ctx().new_dynamic_size(min=1, max=4)


_MODE_CODES = frozenset(map(int, ImageReadMode))


def _check_codes(mode: int, on_warning: int) -> None:
    """A fake call fails where the kernel's check of the option codes (csrc/common/checked_options.h) fails."""
    torch._check_value(mode in _MODE_CODES, lambda: f"custom_op: mode code {mode} is not a read mode")
    torch._check_value(
        on_warning in ON_WARNING.values(), lambda: f"custom_op: on_warning code {on_warning} is not a warning policy"
    )


def _check_bytes(data) -> None:
    torch._check(data.dtype == torch.uint8 and data.dim() == 1, lambda: "custom_op: data must be 1-D uint8")


def _decode_and_crop_jpeg_fake(data, top, left, height, width, *, mode, on_warning, **_options):
    _check_bytes(data)
    _check_codes(mode, on_warning)
    return data.new_empty((_channels(mode), height, width)), _warnings_text(data)


def _warnings_text(data):
    return data.new_empty((torch.library.get_ctx().new_dynamic_size(min=0),))


def _decode_jpeg_fake(data, *, mode, on_warning, **_options):
    _check_bytes(data)
    _check_codes(mode, on_warning)
    ctx = torch.library.get_ctx()
    return data.new_empty((_channels(mode), ctx.new_dynamic_size(min=1), ctx.new_dynamic_size(min=1))), _warnings_text(
        data
    )


# Where each output of a CUDA batch's list starts in their one allocation: a multiple of this many
# bytes (csrc/common/output_layout.h, kOutputAlignment; tests/test_ops.py checks they agree).
OUTPUT_ALIGNMENT = 256


def _batch_outputs(data, tops, lefts, heights, widths, whole, mode, on_warning, stack, device, views=False):
    """The images of a batched decode in which every item decodes. It cannot know which items fail:
    a failed item's real output is an empty [0] tensor instead (its status says so). ``views``: a list
    of windows in RGB or GRAY is views of one allocation, as the CUDA operator makes it."""
    n = len(data)
    if not whole:
        torch._check_value(
            len(tops) == n and len(lefts) == n and len(heights) == n and len(widths) == n,
            lambda: f"custom_op: tops, lefts, heights and widths must each have one entry per image ({n})",
        )
    _check_codes(mode, on_warning)
    for d in data:
        _check_bytes(d)
    ctx = torch.library.get_ctx()

    def size(i):
        if whole:  # the image's (displayed) size, known only from the file
            return ctx.new_dynamic_size(min=1), ctx.new_dynamic_size(min=1)
        return heights[i], widths[i]

    if stack:
        if n == 0:
            return [torch.empty((0,), dtype=torch.uint8, device=device)]
        if not whole:
            for i in range(1, n):
                torch._check_value(
                    heights[i] == heights[0] and widths[i] == widths[0],
                    lambda: "custom_op: stack=True needs windows of one size",
                )
        return [torch.empty((n, _channels(mode), *size(0)), dtype=torch.uint8, device=device)]
    shapes = [(_channels(mode), *size(i)) for i in range(n)]
    if not views or whole or mode == int(ImageReadMode.UNCHANGED) or n == 0:
        return [torch.empty(shape, dtype=torch.uint8, device=device) for shape in shapes]
    starts, total = [], 0
    for c, h, w in shapes:
        starts.append(total)
        total = total + (c * h * w + OUTPUT_ALIGNMENT - 1) // OUTPUT_ALIGNMENT * OUTPUT_ALIGNMENT
    block = torch.empty((total,), dtype=torch.uint8, device=device)
    return [block.as_strided((c, h, w), (h * w, w, 1), start) for (c, h, w), start in zip(shapes, starts)]


def _decode_jpegs_fake(data, tops, lefts, heights, widths, *, whole, mode, on_warning, stack, **_options):
    images = _batch_outputs(data, tops, lefts, heights, widths, whole, mode, on_warning, stack, torch.device("cpu"))
    return images, [0] * len(data), [""] * len(data)


_GPU_SCALES = frozenset((1, 2, 4, 8))


def _check_gpu_scales(scales, n: int, whole: bool) -> None:
    """The kernel's check of a GPU batch's scales (csrc/common/checked_options.h, check_gpu_scales)."""
    if not scales:
        return
    torch._check_value(not whole, lambda: "custom_op: scales apply to windows only; a whole-image decode is at scale 8")
    torch._check_value(len(scales) == n, lambda: f"custom_op: scales must have one entry per image ({n})")
    bad = [s for s in scales if s not in _GPU_SCALES]
    torch._check_value(not bad, lambda: f"custom_op: a GPU decode's scale must be 1, 2, 4 or 8, got {bad[0]}")


def _decode_jpegs_cuda_fake(
    data, tops, lefts, heights, widths, *, whole, mode, on_warning, stack, device, scales=(), **_options
):
    # A window is given in the pixels of its item's scaled image: the scales change no shape.
    _check_gpu_scales(scales, len(data), whole)
    images = _batch_outputs(
        data, tops, lefts, heights, widths, whole, mode, on_warning, stack, torch.device("cuda", device), views=True
    )
    # Where each item was decoded is known only once it has run.
    return images, [0] * len(data), [""] * len(data), [-1] * len(data)


# The output dtypes by their codes (csrc/jpeg_core/normalize.h, OutputDtype; custom_op._resample's
# OUTPUT_DTYPES, which tests/test_ops.py checks against the library, inverted).
_OUTPUT_DTYPES = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)


def _resized_crop_outputs(
    data,
    tops,
    lefts,
    heights,
    widths,
    *,
    size,
    resize_shorter,
    flips,
    mean,
    std,
    dtype,
    mode,
    on_warning,
    where,
    **_options,
):
    """The outputs of a batched resized crop on device `where` (the stacked images, every item of the
    output size; statuses; messages), after the call-level checks of csrc/common/resized_crop_args.h."""
    n = len(data)
    windows = 0 if resize_shorter > 0 else n
    torch._check_value(
        len(tops) == windows and len(lefts) == windows and len(heights) == windows and len(widths) == windows,
        lambda: f"custom_op: tops, lefts, heights and widths must each have {windows} entries",
    )
    torch._check_value(len(size) == 2 and size[0] >= 1 and size[1] >= 1, lambda: f"custom_op: bad size {size}")
    torch._check_value(len(flips) in (0, n), lambda: "custom_op: flips must be empty or one per image")
    torch._check_value(len(mean) == len(std), lambda: "custom_op: mean and std must have one value per channel each")
    torch._check_value(
        0 <= dtype < len(_OUTPUT_DTYPES), lambda: f"custom_op: dtype code {dtype} is not an output dtype"
    )
    _check_codes(mode, on_warning)
    for d in data:
        _check_bytes(d)
    # Mode UNCHANGED: the decoded items' channel count, 0 when none decodes.
    channels = MODE_CHANNELS.get(mode)
    if channels is None:
        channels = torch.library.get_ctx().new_dynamic_size(min=0, max=4)
    images = torch.empty((n, channels, size[0], size[1]), dtype=_OUTPUT_DTYPES[dtype], device=where)
    return images, [0] * n, [""] * n


def _decode_and_resized_crop_jpegs_fake(data, tops, lefts, heights, widths, **options):
    return _resized_crop_outputs(data, tops, lefts, heights, widths, where=torch.device("cpu"), **options)


def _decode_and_resized_crop_jpegs_cuda_fake(data, tops, lefts, heights, widths, *, device, **options):
    outputs = _resized_crop_outputs(data, tops, lefts, heights, widths, where=torch.device("cuda", device), **options)
    # Where each item was decoded is known only once it has run.
    return (*outputs, [-1] * len(data))


def _prepare_jpeg_fake(data, **_options):
    _check_bytes(data)
    return data.new_empty((torch.library.get_ctx().new_dynamic_size(min=2),))


def _resize_box_fake(image, *, out_window, **_options):
    torch._check(
        image.dtype == torch.uint8 and image.dim() in (3, 4),
        lambda: "custom_op: image must be [C, H, W] or [N, C, H, W] uint8",
    )
    return image.new_empty((*image.shape[:-2], out_window[2], out_window[3]))


def _jpeg_sub_image_fake(data, top, left, height, width):
    _check_bytes(data)
    return data.new_empty((torch.library.get_ctx().new_dynamic_size(min=0),)), [0, 0, 0, 0]


def _segment_list(data):
    """A list of restart segments: how many is known only from the file's header."""
    return data.new_empty((torch.library.get_ctx().new_dynamic_size(min=0),), dtype=torch.int64)


def _jpeg_segments_read_fake(data, top, left, height, width):
    _check_bytes(data)
    return -1, _segment_list(data)


def _cuda_decoder_segments_fake(data, tops, lefts, heights, widths):
    _check_bytes(data)
    return _segment_list(data)


def _check_entropy_data_fake(data):
    for d in data:
        _check_bytes(d)
    # What the check finds is known only once it has read the files: "nothing wrong" here.
    return [0] * len(data)


FAKE_KERNELS = {
    "custom_op::decode_and_crop_jpeg": _decode_and_crop_jpeg_fake,
    "custom_op::decode_jpeg": _decode_jpeg_fake,
    "custom_op::decode_jpegs": _decode_jpegs_fake,
    "custom_op::decode_jpegs_cuda": _decode_jpegs_cuda_fake,
    "custom_op::decode_and_resized_crop_jpegs": _decode_and_resized_crop_jpegs_fake,
    "custom_op::decode_and_resized_crop_jpegs_cuda": _decode_and_resized_crop_jpegs_cuda_fake,
    "custom_op::prepare_jpeg": _prepare_jpeg_fake,
    "custom_op::resize_box": _resize_box_fake,
    "custom_op::_jpeg_sub_image": _jpeg_sub_image_fake,
    "custom_op::_jpeg_segments_read": _jpeg_segments_read_fake,
    "custom_op::_cuda_decoder_segments": _cuda_decoder_segments_fake,
    "custom_op::_check_entropy_data": _check_entropy_data_fake,
}


def register_fake_kernels() -> None:
    """Registers every fake kernel; called once, by ``import custom_op``, after the CPU library loads."""
    for name, kernel in FAKE_KERNELS.items():
        torch.library.register_fake(name, kernel)
