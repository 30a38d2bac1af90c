"""The model the step-time tool trains: a small CNN of its own, or a torchvision model by name.

The small CNN is deliberately light: the tool exists to show what the input pipeline costs, and on a
2-core CPU a heavy model would hide it. Models take the pipelines' uint8 BGR batches and convert and
normalize them themselves, so that work runs where the model runs (on the GPU when there is one).
"""

from __future__ import annotations

import torch
from torch import nn

SMALL_CNN = "small_cnn"

# ImageNet mean/std in BGR order, the channel order the further transforms produce.
_MEAN_BGR = (0.406 * 255, 0.456 * 255, 0.485 * 255)
_STD_BGR = (0.225 * 255, 0.224 * 255, 0.229 * 255)


class NormalizeUint8(nn.Module):
    """uint8 [B, 3, H, W] -> float32 normalized with the ImageNet statistics."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor(_MEAN_BGR).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(_STD_BGR).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In place on the fresh float copy: one temporary batch instead of three.
        return x.float().sub_(self.mean).div_(self.std)


def small_cnn(num_classes: int) -> nn.Module:
    """Three strided convolutions and a linear head: ~4 MFLOP of forward work per 224x224 image."""
    return nn.Sequential(
        NormalizeUint8(),
        nn.Conv2d(3, 8, kernel_size=5, stride=4, padding=2),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, kernel_size=3, stride=2, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


def build_model(name: str, num_classes: int) -> nn.Module:
    """SMALL_CNN, or any torchvision.models name (e.g. resnet18) when torchvision is installed."""
    if name == SMALL_CNN:
        return small_cnn(num_classes)
    try:
        import torchvision
    except ImportError:
        raise ValueError(
            f"unknown model {name!r}: only {SMALL_CNN!r} is available without torchvision "
            "(install torchvision to use its models by name)"
        ) from None
    try:
        net = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    except ValueError as e:
        raise ValueError(f"unknown model {name!r}: not {SMALL_CNN!r} nor a torchvision model ({e})") from None
    return nn.Sequential(NormalizeUint8(), net)
