"""In-memory sample containers shared by every loader and partitioner.

Datasets are small enough (MNIST-1D, CIFAR-10, FEMNIST) to live in memory as numpy arrays,
so partitions can be plain index arrays into one pool instead of copies per client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArrayDataset:
    """Samples ``x`` (float32, channel-first) with integer labels ``y`` (int64)."""

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        # Catch loader bugs here rather than as a dtype error deep inside training.
        if self.x.dtype != np.float32:
            raise ValueError(f"x must be float32, got {self.x.dtype}")
        if self.y.dtype != np.int64 or self.y.ndim != 1:
            raise ValueError(f"y must be a 1-D int64 array, got {self.y.dtype} {self.y.shape}")
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} samples but y has {len(self.y)}")

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, idx: np.ndarray) -> ArrayDataset:
        """The samples at ``idx`` (a copy, so the pool can be released independently)."""
        return ArrayDataset(self.x[idx], self.y[idx])


@dataclass(frozen=True)
class DataPool:
    """A whole dataset before partitioning.

    ``train`` is where clients' train and validation samples come from, ``test`` where their
    test samples are drawn from. ``train_groups``/``test_groups`` carry a natural split (one
    index array per FEMNIST writer) when the dataset has one.
    """

    name: str
    train: ArrayDataset
    test: ArrayDataset
    num_classes: int
    input_shape: tuple[int, ...]
    train_groups: list[np.ndarray] | None = None
    test_groups: list[np.ndarray] | None = None

    def __post_init__(self) -> None:
        for split, data in (("train", self.train), ("test", self.test)):
            if data.x.shape[1:] != self.input_shape:
                raise ValueError(
                    f"{split} samples have shape {data.x.shape[1:]}, expected {self.input_shape}"
                )
            if len(data) and (data.y.min() < 0 or data.y.max() >= self.num_classes):
                raise ValueError(f"{split} labels must lie in [0, {self.num_classes})")
        if (self.train_groups is None) != (self.test_groups is None):
            raise ValueError("train_groups and test_groups must be given together")
        if (
            self.train_groups is not None
            and self.test_groups is not None
            and len(self.train_groups) != len(self.test_groups)
        ):
            raise ValueError("train_groups and test_groups must have one entry per writer each")
