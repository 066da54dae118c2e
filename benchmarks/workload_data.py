"""The GPU workload's data: CIFAR-shaped images on disk, read through a ``data.source``.

``write(folder, clients, train, test)`` writes ``client-<k>/{train,test}_{x,y}.npy``: uint8
3×32×32 images drawn around one smooth pattern per class, with a Dirichlet(0.5) label mix
per client (non-IID, so collaborators matter). ``factory(client_id)`` is the data.source a
lab would write: it opens the client's arrays memory-mapped, so an image is read from disk
when a batch needs it and the set is never loaded whole. The folder is $WORKLOAD_DATA.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

CLASSES = 10
SHAPE = (3, 32, 32)


class DiskImages(Dataset[Any]):
    """One client split's images, opened lazily in each process that reads them (a
    DataLoader worker opens its own memory map instead of pickling one)."""

    def __init__(self, folder: Path, split: str) -> None:
        self.x_path, self.y_path = folder / f"{split}_x.npy", folder / f"{split}_y.npy"
        self.targets = np.load(self.y_path)  # labels: small, read once
        self._x: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self._x is None:
            self._x = np.load(self.x_path, mmap_mode="r")
        image = torch.from_numpy(np.array(self._x[i], dtype=np.float32))
        return image.div_(127.5).sub_(1.0), int(self.targets[i])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_x": None}


def factory(client_id: int) -> dict[str, Any]:
    """Client ``client_id``'s train and test splits (val: held out of train by seed)."""
    folder = Path(os.environ["WORKLOAD_DATA"]) / f"client-{client_id}"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: write the data first (benchmarks/workload_data.py)")
    return {
        "train": DiskImages(folder, "train"),
        "test": DiskImages(folder, "test"),
        "num_classes": CLASSES,
    }


def write(folder: Path, clients: int, train: int, test: int, seed: int = 0) -> None:
    """Every client's images and labels, ``train`` + ``test`` each."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(size=(CLASSES, SHAPE[0], 4, 4))
    patterns = np.kron(coarse, np.ones((1, 1, 8, 8)))  # one smooth pattern per class
    for k in range(clients):
        mix = rng.dirichlet(np.full(CLASSES, 0.5))
        out = folder / f"client-{k}"
        out.mkdir(parents=True, exist_ok=True)
        for split, count in (("train", train), ("test", test)):
            labels = rng.choice(CLASSES, size=count, p=mix).astype(np.int64)
            noisy = patterns[labels] + rng.normal(scale=1.2, size=(count, *SHAPE))
            pixels = np.clip(127.5 + 40.0 * noisy, 0, 255).astype(np.uint8)
            np.save(out / f"{split}_x.npy", pixels)
            np.save(out / f"{split}_y.npy", labels)
