"""``load_pool``: one entry point for every supported dataset, by name."""

from __future__ import annotations

from pathlib import Path

from .arrays import DataPool
from .cifar10 import load_cifar10
from .cinic10 import load_cinic10
from .femnist import load_femnist
from .mnist1d import load_mnist1d

POOLS = ("mnist1d", "cifar10", "cinic10", "femnist")
_BY_PATH = {"cifar10": load_cifar10, "cinic10": load_cinic10, "femnist": load_femnist}


def load_pool(
    name: str,
    *,
    root: Path | None = None,
    cache_dir: Path,
    seed: int = 0,
    num_train: int = 16000,
    num_test: int = 8000,
) -> DataPool:
    """Load dataset ``name``.

    MNIST-1D is generated offline (``seed``, ``num_train``, ``num_test`` apply only to it)
    and cached in ``cache_dir``; the other datasets are read from the user's copy at ``root``.
    """
    if name == "mnist1d":
        return load_mnist1d(Path(cache_dir), seed=seed, num_train=num_train, num_test=num_test)
    if name not in _BY_PATH:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(POOLS)}")
    if root is None:
        raise ValueError(f"root is required for dataset {name!r}: the folder holding its files")
    return _BY_PATH[name](Path(root))
