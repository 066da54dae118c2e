"""``data.source`` factories the tests name by import path (``tests.support.sources:...``):
small MNIST-1D-shaped blobs per client, and factories that are wrong in one way each."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

CLASSES = 10
LENGTH = 40


class Blobs(Dataset[Any]):
    """``size`` samples of ``(1, LENGTH)`` inputs around one centre per class; the same
    items for the same ``seed``, read one at a time (nothing held but the labels' seed)."""

    def __init__(self, size: int, seed: int, length: int = LENGTH, top: int = CLASSES) -> None:
        self.size, self.seed, self.length, self.top = size, seed, length, top
        self.centres = np.random.default_rng(1234).normal(size=(CLASSES, length))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if not 0 <= i < self.size:
            raise IndexError(i)
        rng = np.random.default_rng(self.seed * 1_000_003 + i)
        label = int(rng.integers(self.top))
        x = self.centres[label % CLASSES] + rng.normal(scale=1.5, size=self.length)
        return torch.as_tensor(x, dtype=torch.float32).reshape(1, self.length), label


def blobs(client_id: int) -> dict[str, Any]:
    """Train and test Datasets; val is held out of train by the run's seed."""
    return {
        "train": Blobs(120 + 40 * client_id, seed=10 * client_id),
        "test": Blobs(80, seed=10 * client_id + 1),
        "num_classes": CLASSES,
    }


def blobs_with_val(client_id: int) -> dict[str, Any]:
    """``blobs`` with a val split of arrays (x, y)."""
    val = Blobs(30, seed=10 * client_id + 2)
    items = [val[i] for i in range(len(val))]
    x = np.stack([x.numpy() for x, _ in items])
    y = np.array([label for _, label in items])
    return {**blobs(client_id), "val": (x, y)}


def wrong_labels(client_id: int) -> dict[str, Any]:
    """Client 1's test labels run to 11 though it declares 10 classes (its first item's
    label is 10)."""
    data = blobs(client_id)
    if client_id == 1:
        data["test"] = Blobs(80, seed=0, top=12)
    return data


def mismatched_shape(client_id: int) -> dict[str, Any]:
    """Client 1's val inputs are one longer than everyone else's."""
    data = blobs(client_id)
    if client_id == 1:
        data["val"] = Blobs(30, seed=12, length=LENGTH + 1)
    return data


def missing_test(client_id: int) -> dict[str, Any]:
    data = blobs(client_id)
    del data["test"]
    return data


def three_classes(client_id: int) -> dict[str, Any]:
    """Labels 0..2 only: a 10-output model does not fit."""
    return {
        "train": Blobs(60, seed=client_id, top=3),
        "test": Blobs(30, seed=client_id + 100, top=3),
        "num_classes": 3,
    }
