"""CINIC-10 from its image-folder layout: ``root/{train,valid,test}/<class>/*.png``.

train and valid together form the training pool (clients carve their own validation split
out of it); test is the test pool.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from .arrays import ArrayDataset, DataPool
from .images import CINIC10_MEAN, CINIC10_STD, normalize_rgb

# Sorted, so a class's index is its position among the sorted folder names.
CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
IMAGE_SIZE = (32, 32)


def load_cinic10(root: Path) -> DataPool:
    """All CINIC-10 images under ``root``, labelled by their sorted class folder name."""
    root = Path(root)
    train = [_read_split(root / "train"), _read_split(root / "valid")]
    return DataPool(
        name="cinic10",
        train=ArrayDataset(
            np.concatenate([s.x for s in train]), np.concatenate([s.y for s in train])
        ),
        test=_read_split(root / "test"),
        num_classes=len(CLASSES),
        input_shape=(3, *IMAGE_SIZE),
    )


def _read_split(folder: Path) -> ArrayDataset:
    if not folder.is_dir():
        raise FileNotFoundError(f"CINIC-10 folder not found: expected {folder}")
    found = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if found != list(CLASSES):
        raise ValueError(f"{folder}: expected one folder per class {list(CLASSES)}, found {found}")
    images: list[np.ndarray] = []
    labels: list[int] = []
    for label, name in enumerate(CLASSES):
        files = sorted((folder / name).glob("*.png"))
        if not files:
            raise ValueError(f"{folder / name}: no .png images")
        images.extend(_read_png(f) for f in files)
        labels.extend([label] * len(files))
    pixels = np.stack(images).transpose(0, 3, 1, 2)  # (n, h, w, c) -> channel-first
    return ArrayDataset(
        normalize_rgb(pixels, CINIC10_MEAN, CINIC10_STD), np.asarray(labels, dtype=np.int64)
    )


def _read_png(path: Path) -> np.ndarray:
    try:
        with Image.open(path) as img:
            if img.size != IMAGE_SIZE:
                raise ValueError(f"{path}: image is {img.size[0]}x{img.size[1]}, expected 32x32")
            # A few CINIC-10 images (from ImageNet) are grayscale; give every image 3 channels.
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"{path}: not a readable image ({e})") from e
