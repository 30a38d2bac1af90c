"""Fake (meta) kernels for the C++ operators, so torch.compile and FakeTensor tracing know their outputs.

The schemas live in csrc/ (ops.cpp, cpu/, cuda/); this module only describes output shapes. Sizes that
depend on the file's contents (the image size for decode_jpeg, the channel count for UNCHANGED) are dynamic.
"""

import torch

_MODE_CHANNELS = {1: 1, 2: 3}  # GRAY, RGB; UNCHANGED (0) depends on the file


def _channels(mode: int):
    channels = _MODE_CHANNELS.get(mode)
    return channels if channels is not None else torch.library.get_ctx().new_dynamic_size(min=1, max=4)


def register_fake_kernels() -> None:
    @torch.library.register_fake("custom_op::decode_and_crop_jpeg")
    def _decode_and_crop_jpeg_fake(data, top, left, height, width, mode, apply_exif_orientation,
                                   on_warning, max_pixels, scale_num=8):
        torch._check(data.dtype == torch.uint8 and data.dim() == 1, lambda: "data must be 1-D uint8")
        return data.new_empty((_channels(mode), height, width))

    @torch.library.register_fake("custom_op::decode_jpeg")
    def _decode_jpeg_fake(data, mode, apply_exif_orientation, on_warning, max_pixels):
        torch._check(data.dtype == torch.uint8 and data.dim() == 1, lambda: "data must be 1-D uint8")
        ctx = torch.library.get_ctx()
        return data.new_empty((_channels(mode), ctx.new_dynamic_size(min=1), ctx.new_dynamic_size(min=1)))

    @torch.library.register_fake("custom_op::decode_and_crop_jpeg_with_warnings")
    def _decode_and_crop_jpeg_with_warnings_fake(data, top, left, height, width, mode, apply_exif_orientation,
                                                 max_pixels, scale_num=8):
        return _decode_and_crop_jpeg_fake(data, top, left, height, width, mode, apply_exif_orientation, 1,
                                          max_pixels, scale_num), ""

    @torch.library.register_fake("custom_op::decode_jpeg_with_warnings")
    def _decode_jpeg_with_warnings_fake(data, mode, apply_exif_orientation, max_pixels):
        return _decode_jpeg_fake(data, mode, apply_exif_orientation, 1, max_pixels), ""


def register_resize_fake_kernel() -> None:
    """The fake kernel of custom_op::resize_box (schema in csrc/cpu/resize_cpu.cpp)."""

    @torch.library.register_fake("custom_op::resize_box")
    def _resize_box_fake(image, box, size, out_window, origin, filter, antialias):
        torch._check(image.dtype == torch.uint8 and image.dim() == 3, lambda: "image must be [C, H, W] uint8")
        return image.new_empty((image.shape[0], out_window[2], out_window[3]))


# debug bit of custom_op::_decode_jpegs_cuda for decode_jpeg: whole images, the windows are ignored
# (kWhole in csrc/cuda/decode_cuda.cpp).
_CUDA_WHOLE = 512
# Where each item was decoded is known only once it has run (see Path in csrc/cuda/decode_cuda.cpp).
_CUDA_PATH_UNKNOWN = -1


def _decode_jpegs_cuda_fake(data, tops, lefts, heights, widths, mode, apply_exif_orientation, on_warning,
                            max_pixels, device, stack, return_errors, debug):
    """Outputs of custom_op::_decode_jpegs_cuda for items that decode: uint8 [C, h, w] on cuda:<device>
    per item, or with stack=True a one-element list holding [N, C, h, w]; then one error text and one
    path per item. It cannot know which items fail: with return_errors=True a failed item's real output
    is an empty [0] tensor instead (and its error text is not empty)."""
    n = len(data)
    torch._check_value(len(tops) == n and len(lefts) == n and len(heights) == n and len(widths) == n,
                       lambda: f"custom_op: tops, lefts, heights and widths must each have one entry per image ({n})")
    torch._check_value(0 <= mode <= 2, lambda: f"mode code must be 0 (UNCHANGED), 1 (GRAY) or 2 (RGB), got {mode}")
    for d in data:
        torch._check(d.dtype == torch.uint8 and d.dim() == 1, lambda: "data must be 1-D uint8 tensors")
    ctx = torch.library.get_ctx()
    whole = bool(debug & _CUDA_WHOLE)
    out_device = torch.device("cuda", device)

    def window(i):
        # decode_jpeg: the image's (displayed) size, known only from the file.
        if whole:
            return ctx.new_dynamic_size(min=1), ctx.new_dynamic_size(min=1)
        return heights[i], widths[i]

    errors = [""] * n
    paths = [_CUDA_PATH_UNKNOWN] * n
    if stack and n > 0:
        if not whole:
            for i in range(1, n):
                torch._check_value(heights[i] == heights[0] and widths[i] == widths[0],
                                   lambda: "custom_op: stack=True needs windows of one size")
        stacked = torch.empty((n, _channels(mode), *window(0)), dtype=torch.uint8, device=out_device)
        return [stacked], errors, paths
    outputs = [torch.empty((_channels(mode), *window(i)), dtype=torch.uint8, device=out_device) for i in range(n)]
    return outputs, errors, paths


def register_cuda_fake_kernel() -> None:
    """The fake kernel of custom_op::_decode_jpegs_cuda (schema in csrc/cuda/decode_cuda.cpp); call it
    once the GPU library is loaded, since the operator does not exist before."""
    torch.library.register_fake("custom_op::_decode_jpegs_cuda", _decode_jpegs_cuda_fake)
