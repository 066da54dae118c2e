"""Turning 8-bit RGB images into normalized float tensors (CIFAR-10 and CINIC-10)."""

from __future__ import annotations

import numpy as np

# Per-channel statistics of each dataset's training images, as fractions of 255.
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CINIC10_MEAN = (0.47889522, 0.47227842, 0.43047404)
CINIC10_STD = (0.24205776, 0.23828046, 0.25874835)


def normalize_rgb(
    images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]
) -> np.ndarray:
    """Scale uint8 ``(n, 3, h, w)`` images to [0, 1] and standardize each channel."""
    m = np.asarray(mean, dtype=np.float32).reshape(1, 3, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, 3, 1, 1)
    x = images.astype(np.float32) / np.float32(255.0)
    x -= m
    x /= s
    return x
