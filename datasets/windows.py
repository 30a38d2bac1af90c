"""Per-sample random streams and the random crop window.

The window of sample i depends only on (seed, epoch, i): never on which DataLoader worker loads it or
in which order. The `pil` and `roi` pipelines draw it with the same code from the same stream, from the
image size alone (PIL's header parse or custom_op.read_jpeg_header), so the same seed gives the same
windows in both.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

# Separate streams for the window and for the further transforms: a sample's mask is then the same
# whichever way its window was drawn (the rrc pipelines draw theirs differently).
WINDOW_STREAM = 0
TRANSFORM_STREAM = 1


class Window(NamedTuple):
    top: int
    left: int
    height: int
    width: int


def sample_rng(seed: int, epoch: int, index: int, stream: int) -> np.random.Generator:
    """The random generator of one sample's window or transforms."""
    if min(seed, epoch, index, stream) < 0:
        raise ValueError(f"seed, epoch and index must be >= 0, got seed={seed}, epoch={epoch}, index={index}")
    return np.random.default_rng([seed, epoch, index, stream])


def random_window(
    image_height: int, image_width: int, crop_height: int, crop_width: int, rng: np.random.Generator
) -> Window:
    """A uniformly placed crop_height x crop_width window inside the image.

    An image smaller than the crop in a dimension gives a window as large as the image in that
    dimension (the later scale transform brings every sample to the same output size).
    """
    if image_height < 1 or image_width < 1:
        raise ValueError(f"image size must be positive, got {image_height}x{image_width}")
    h = min(crop_height, image_height)
    w = min(crop_width, image_width)
    top = int(rng.integers(0, image_height - h + 1))
    left = int(rng.integers(0, image_width - w + 1))
    return Window(top, left, h, w)


def random_resized_crop_window(image_height: int, image_width: int, rng: np.random.Generator) -> Window:
    """A RandomResizedCrop window (torchvision's algorithm and defaults: area 8% to 100% of the image,
    aspect 3/4 to 4/3), drawn from a torch.Generator seeded from `rng`, so that the `pil-rrc` and
    `rrc` pipelines draw the same windows."""
    import torch

    generator = torch.Generator().manual_seed(int(rng.integers(0, 2**63 - 1)))
    return Window(*_random_resized_crop().get_params(image_height, image_width, generator))


@functools.cache
def _random_resized_crop():
    from custom_op.transforms import RandomResizedCropJpeg

    return RandomResizedCropJpeg(1)  # get_params does not depend on the output size
