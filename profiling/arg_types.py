"""argparse value types shared by the step-time tool and the torchrun / SageMaker entry point."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def image_size(text: str) -> tuple[int, int]:
    """HEIGHTxWIDTH, e.g. 533x800 (SageMaker may pass hyperparameters as non-strings: str() first)."""
    try:
        h, w = (int(p) for p in str(text).lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HEIGHTxWIDTH such as 533x800, got {text!r}") from None
    if h < 1 or w < 1:
        raise argparse.ArgumentTypeError(f"image size must be positive, got {text!r}")
    return h, w
