"""Fake (meta) kernels for the C++ operators, so torch.compile and FakeTensor tracing know their outputs.

The schemas live in csrc/ops.cpp; this module only describes output shapes. Sizes that depend on the
file's contents (the image size for decode_jpeg, the channel count for UNCHANGED) are dynamic.
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
