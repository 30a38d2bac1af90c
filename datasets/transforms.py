"""The further transforms after the crop, the same code for every pipeline.

They follow the blog's experiment: a random mask, a color conversion and a scale. They take and
return a CHW uint8 tensor, so the pipelines differ only in how the window is decoded, and the
float conversion and normalization happen where the model runs (on the GPU when there is one), which
also keeps the batches that workers send 4x smaller.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_OUTPUT_SIZE = 224


def random_mask(img: torch.Tensor, rng: np.random.Generator, max_fraction: float = 0.5) -> torch.Tensor:
    """Zero a random rectangle (each side up to max_fraction of the image's) in place: cutout-style."""
    _, h, w = img.shape
    mh = int(rng.integers(0, int(h * max_fraction) + 1))
    mw = int(rng.integers(0, int(w * max_fraction) + 1))
    top = int(rng.integers(0, h - mh + 1))
    left = int(rng.integers(0, w - mw + 1))
    img[:, top : top + mh, left : left + mw] = 0
    return img


def rgb_to_bgr(img: torch.Tensor) -> torch.Tensor:
    """Channel order RGB -> BGR, as models trained with OpenCV-loaded data expect."""
    return img.flip(0)


def scale(img: torch.Tensor, size: int = DEFAULT_OUTPUT_SIZE) -> torch.Tensor:
    """Resize to size x size with antialiased bilinear interpolation; the result stays uint8.

    An image already of that size (the rrc pipelines resize while decoding) is returned as it is."""
    if img.shape[-2:] == (size, size):
        return img
    if img.device.type == "cpu":
        # torch's CPU kernel resizes uint8 directly (and rounds), with no float copy of the image.
        return F.interpolate(img[None], size=(size, size), mode="bilinear", antialias=True, align_corners=False)[0]
    out = F.interpolate(img[None].float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)[0]
    return out.round_().clamp_(0, 255).to(torch.uint8)


def further_transforms(
    img: torch.Tensor, rng: np.random.Generator, output_size: int = DEFAULT_OUTPUT_SIZE
) -> torch.Tensor:
    """Mask, color conversion, scale: CHW uint8 window -> CHW uint8 (3, output_size, output_size)."""
    img = random_mask(img, rng)
    img = rgb_to_bgr(img)
    return scale(img, output_size).contiguous()
