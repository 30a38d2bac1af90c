"""The further transforms after the crop, the same code for every pipeline.

They follow the blog's experiment: a random mask, a color conversion and a scale. They take and
return a CHW uint8 tensor, so the pipelines differ only in how the window is decoded, and the
float conversion and normalization happen where the model runs (on the GPU when there is one), which
also keeps the batches that workers send 4x smaller.
"""

from __future__ import annotations

import numpy as np
import torch

DEFAULT_OUTPUT_SIZE = 224


def mask_box(h: int, w: int, rng: np.random.Generator, max_fraction: float = 0.5) -> tuple[int, int, int, int]:
    """The rectangle random_mask zeroes in an h x w image, (top, left, height, width): each side up to
    max_fraction of the image's, drawn from rng."""
    mh = int(rng.integers(0, int(h * max_fraction) + 1))
    mw = int(rng.integers(0, int(w * max_fraction) + 1))
    top = int(rng.integers(0, h - mh + 1))
    left = int(rng.integers(0, w - mw + 1))
    return top, left, mh, mw


def random_mask(img: torch.Tensor, rng: np.random.Generator, max_fraction: float = 0.5) -> torch.Tensor:
    """Zero a random rectangle (each side up to max_fraction of the image's) in place: cutout-style."""
    top, left, mh, mw = mask_box(img.shape[1], img.shape[2], rng, max_fraction)
    img[:, top : top + mh, left : left + mw] = 0
    return img


def rgb_to_bgr(img: torch.Tensor) -> torch.Tensor:
    """Channel order RGB -> BGR, as models trained with OpenCV-loaded data expect: of a CHW image, or of
    each image of an NCHW batch."""
    return img.flip(-3)


def scale(img: torch.Tensor, size: int = DEFAULT_OUTPUT_SIZE) -> torch.Tensor:
    """Resize to size x size with antialiased bilinear interpolation; the result stays uint8.

    An image already of that size (the rrc pipelines resize while decoding) is returned as it is."""
    return _scale_images(img[None], size)[0]


def _scale_images(images: torch.Tensor, size: int) -> torch.Tensor:
    """scale() of each image of an [N, C, h, w] batch, in one call: custom_op's resampler
    (Pillow's bilinear arithmetic, in uint8), whose CPU and CUDA kernels give the same pixels, so that
    a batch transformed on the GPU equals the same samples transformed in the workers."""
    if images.shape[-2:] == (size, size):
        return images
    import custom_op  # noqa: F401  (loads the operators)

    h, w = images.shape[-2:]
    return torch.ops.custom_op.resize_box(
        images.contiguous(),
        box=[0.0, 0.0, float(h), float(w)],
        size=[size, size],
        out_window=[0, 0, size, size],
        origin=[0, 0],
        filter=1,
        antialias=True,
    )


def further_transforms(
    img: torch.Tensor, rng: np.random.Generator, output_size: int = DEFAULT_OUTPUT_SIZE
) -> torch.Tensor:
    """Mask, color conversion, scale: CHW uint8 window -> CHW uint8 (3, output_size, output_size)."""
    img = random_mask(img, rng)
    img = rgb_to_bgr(img)
    return scale(img, output_size).contiguous()


def further_transforms_batch(
    images: list[torch.Tensor], masks: torch.Tensor, output_size: int = DEFAULT_OUTPUT_SIZE
) -> torch.Tensor:
    """further_transforms of each image, with the rectangle its random mask zeroes given (masks[i]:
    image i's mask_box, drawn from the rng further_transforms would get), as one uint8
    [N, 3, output_size, output_size]: the same pixels, in a few operations per group of images of one
    size instead of several per image (on a GPU, each is a kernel launch). The images are not
    changed. masks: an int64 [N, 4] tensor of (top, left, height, width) rows, on the CPU (pinned
    memory, as a DataLoader with pin_memory=True gives it, copies without waiting) or on the images'
    device."""
    if not images:
        return torch.empty((0, 3, output_size, output_size), dtype=torch.uint8)
    if masks.shape != (len(images), 4):
        raise ValueError(f"masks must be a [{len(images)}, 4] tensor, one row per image; got {list(masks.shape)}")
    device = images[0].device
    masks = masks.to(device, non_blocking=True)
    # Images of one size are transformed together: the windows of photos smaller than the crop differ.
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, img in enumerate(images):
        groups.setdefault(tuple(img.shape), []).append(i)
    out = None  # made only where the images are of several sizes
    for (_, h, w), members in groups.items():
        batch = torch.stack([images[i] for i in members])  # a copy: the images are not changed
        index = None if len(groups) == 1 else torch.tensor(members, device=device)  # the group's rows
        boxes = masks if index is None else masks[index]
        top, left, mh, mw = (boxes[:, k, None, None] for k in range(4))
        rows = torch.arange(h, device=device)[None, :, None]
        cols = torch.arange(w, device=device)[None, None, :]
        inside = (rows >= top) & (rows < top + mh) & (cols >= left) & (cols < left + mw)
        batch.masked_fill_(inside[:, None], 0)
        scaled = _scale_images(rgb_to_bgr(batch), output_size)
        if index is None:
            return scaled.contiguous()
        if out is None:
            out = torch.empty((len(images), *scaled.shape[1:]), dtype=torch.uint8, device=device)
        out[index] = scaled
    return out
