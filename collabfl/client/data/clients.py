"""Materializing a partition: each client's actual samples, with its label map and its
input rotation applied."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .arrays import ArrayDataset, DataPool
from .splits import ClientSplit, Partition


@dataclass(frozen=True)
class ClientData:
    """One client's samples. ``malicious`` clients see permuted labels in every split."""

    client_id: int
    train: ArrayDataset
    val: ArrayDataset
    test: ArrayDataset
    malicious: bool


def client_datasets(pool: DataPool, partition: Partition) -> list[ClientData]:
    """Every client's datasets; ``ValueError`` if the partition was made for another pool."""
    _check_pool(pool, partition)
    return [_client(k, pool, split) for k, split in enumerate(partition.clients)]


def rotate(x: np.ndarray, degrees: float) -> np.ndarray:
    """Inputs turned by ``degrees`` (feature shift), as a new array.

    Channel-first images ``(n, c, h, w)`` turn about their centre, counter-clockwise as
    displayed (row 0 on top), sampled bilinearly; what comes from outside the image is 0.
    Signals ``(n, c, length)`` or ``(n, length)`` have no plane to turn in, so they get the
    analogue that keeps every value: a circular shift by ``round(degrees / 360 * length)``
    positions towards higher indices.
    """
    if x.ndim == 4:
        return _rotate_images(x, degrees)
    if x.ndim in (2, 3):
        return np.roll(x, round(degrees / 360 * x.shape[-1]), axis=-1)
    raise ValueError(f"cannot rotate inputs of shape {x.shape[1:]}: expected (c, h, w) or (c, l)")


def _rotate_images(x: np.ndarray, degrees: float) -> np.ndarray:
    # Imported here: only feature-shift partitions need torch in the data layer.
    import torch
    import torch.nn.functional as F

    n, _, h, w = x.shape
    if n == 0:
        return x.copy()
    cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    # The grid maps each output pixel to where it samples from, in [-1, 1] per axis; the
    # h/w factors keep the turn rigid in pixels when the image is not square.
    theta = torch.tensor([[cos, -sin * h / w, 0.0], [sin * w / h, cos, 0.0]])
    images = torch.from_numpy(np.ascontiguousarray(x))
    grid = F.affine_grid(theta.expand(n, 2, 3), [n, *images.shape[1:]], align_corners=False)
    turned = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return turned.numpy()


def _client(k: int, pool: DataPool, split: ClientSplit) -> ClientData:
    train, val, test = (
        _materialize(pool.train, split.train, split),
        _materialize(pool.train, split.val, split),
        _materialize(pool.test, split.test, split),
    )
    return ClientData(client_id=k, train=train, val=val, test=test, malicious=split.malicious)


def _materialize(source: ArrayDataset, idx: np.ndarray, split: ClientSplit) -> ArrayDataset:
    part = source.subset(idx)
    x, y = part.x, part.y
    if split.rotation_degrees is not None:
        x = rotate(x, split.rotation_degrees)
    if split.label_permutation is not None:
        y = split.label_permutation[y]
    return ArrayDataset(x, y)


def _check_pool(pool: DataPool, partition: Partition) -> None:
    made_for = partition.meta.get("pool", {})
    actual = {
        "name": pool.name,
        "num_train": len(pool.train),
        "num_test": len(pool.test),
        "num_classes": pool.num_classes,
    }
    mismatched = [k for k, v in actual.items() if made_for.get(k) != v]
    if mismatched:
        raise ValueError(
            f"partition was made for pool {made_for} but got {actual} "
            f"(differs in {', '.join(mismatched)})"
        )
    for k, split in enumerate(partition.clients):
        for name, idx, size in (
            ("train", split.train, len(pool.train)),
            ("val", split.val, len(pool.train)),
            ("test", split.test, len(pool.test)),
        ):
            if len(idx) and (idx.min() < 0 or idx.max() >= size):
                raise ValueError(f"client {k}: {name} indices fall outside the pool (size {size})")
        perm = split.label_permutation
        if perm is not None and sorted(perm.tolist()) != list(range(pool.num_classes)):
            raise ValueError(f"client {k}: label_permutation is not a permutation of the classes")
