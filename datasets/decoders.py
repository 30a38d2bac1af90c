"""Decoding the random window of one JPEG, per pipeline.

- `pil`: the baseline, as torchvision's ImageFolder loader does it: PIL decodes the whole image and
  converts it to RGB, then the window is cropped out.
- `roi`: the window is drawn from custom_op.read_jpeg_header alone and only it is decoded, with
  custom_op.decode_and_crop_jpeg.
- `pil-rrc`: RandomResizedCrop as torchvision does it on a PIL image: a window of 8% to 100% of the
  image, PIL decodes the whole image, then resizes the window to the output size (bilinear).
- `rrc`: the same window from the header alone, decoded at the smallest DCT scale that keeps it at
  least the output size and resized there (custom_op.decode_and_resized_crop_jpeg). Equal to `pil-rrc`
  where the window is decoded at full scale; within the PSNR the README states elsewhere.
Both draw the window with windows.random_window from the same stream and return a CHW uint8 tensor:
custom_op is pixel exact with Pillow for RGB output, so the two agree pixel for pixel.

EXIF orientation is not applied by either (PIL's decode ignores it; read_jpeg_header is called with
apply_exif_orientation=False), so windows are in the stored frame in both.
"""

from __future__ import annotations

import io

import numpy as np
import torch

from .windows import Window, random_resized_crop_window, random_window


def pil_decode_random_crop(
    data: bytes, crop_height: int, crop_width: int, rng: np.random.Generator
) -> tuple[torch.Tensor, Window]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        if im.format != "JPEG":
            raise ValueError(f"not a JPEG file (Pillow reads it as {im.format})")
        # Image.open parses the header only: the window is drawn before any pixel is decoded, as in roi.
        win = random_window(im.height, im.width, crop_height, crop_width, rng)
        rgb = im.convert("RGB")  # decodes the whole image
    crop = rgb.crop((win.left, win.top, win.left + win.width, win.top + win.height))
    return torch.from_numpy(np.array(crop)).permute(2, 0, 1).contiguous(), win


def header_random_window(data, crop_height: int, crop_width: int, rng: np.random.Generator) -> Window:
    import custom_op

    info = custom_op.read_jpeg_header(data)
    return random_window(info.height, info.width, crop_height, crop_width, rng)


def header_random_resized_crop_window(data, rng: np.random.Generator) -> Window:
    """The window fused_random_resized_crop decodes, from the header alone (the gpu-rrc pipeline's
    workers draw it; the training process decodes it)."""
    import custom_op

    info = custom_op.read_jpeg_header(data)
    return random_resized_crop_window(info.height, info.width, rng)


def roi_decode_random_crop(
    data, crop_height: int, crop_width: int, rng: np.random.Generator
) -> tuple[torch.Tensor, Window]:
    import custom_op

    win = header_random_window(data, crop_height, crop_width, rng)
    img = custom_op.decode_and_crop_jpeg(
        data, win.top, win.left, win.height, win.width, mode=custom_op.ImageReadMode.RGB
    )
    return img, win


def pil_random_resized_crop(data: bytes, output_size: int, rng: np.random.Generator) -> tuple[torch.Tensor, Window]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        if im.format != "JPEG":
            raise ValueError(f"not a JPEG file (Pillow reads it as {im.format})")
        win = random_resized_crop_window(im.height, im.width, rng)
        rgb = im.convert("RGB")  # decodes the whole image
    # crop, then resize: what torchvision's RandomResizedCrop does to a PIL image (resize(box=...)
    # would let the filter read pixels beyond the window).
    box = (win.left, win.top, win.left + win.width, win.top + win.height)
    out = rgb.crop(box).resize((output_size, output_size), Image.BILINEAR)
    return torch.from_numpy(np.array(out)).permute(2, 0, 1).contiguous(), win


def fused_random_resized_crop(data, output_size: int, rng: np.random.Generator) -> tuple[torch.Tensor, Window]:
    import custom_op

    win = header_random_resized_crop_window(data, rng)
    img = custom_op.decode_and_resized_crop_jpeg(data, win.top, win.left, win.height, win.width, output_size)
    return img, win
