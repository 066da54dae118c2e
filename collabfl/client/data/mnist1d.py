"""MNIST-1D, the embedded default dataset: generated offline and cached on disk.

The ``mnist1d`` package synthesizes the signals from built-in templates, so nothing is
downloaded (its ``get_dataset`` would download; we never call it). Generation takes seconds
at paper scale, hence the cache keyed by everything that changes the output.
"""

from __future__ import annotations

import logging
import random
import zipfile
from pathlib import Path

import numpy as np

from .arrays import ArrayDataset, DataPool
from .atomic import save_npz_atomic

log = logging.getLogger(__name__)

NUM_CLASSES = 10
SIGNAL_LENGTH = 40
_CACHE_VERSION = 1


def load_mnist1d(cache_dir: Path, *, seed: int, num_train: int, num_test: int) -> DataPool:
    """The MNIST-1D pool of ``num_train`` + ``num_test`` signals generated with ``seed``."""
    if num_train < 1 or num_test < 1:
        raise ValueError(f"num_train and num_test must be >= 1, got {num_train}, {num_test}")
    path = Path(cache_dir) / (
        f"mnist1d_v{_CACHE_VERSION}_seed{seed}_train{num_train}_test{num_test}.npz"
    )
    arrays = _read_cache(path, num_train, num_test)
    if arrays is None:
        save_npz_atomic(path, _generate(seed, num_train, num_test))
        # Serve what a later run will read, not the arrays in hand: same bytes, same memory
        # layout, so a run on a fresh cache equals every run after it (kernels may pick their
        # path by strides).
        arrays = _read_cache(path, num_train, num_test)
        if arrays is None:
            raise OSError(f"MNIST-1D cache {path} could not be read back after writing it")
    return DataPool(
        name="mnist1d",
        train=ArrayDataset(arrays["x_train"], arrays["y_train"]),
        test=ArrayDataset(arrays["x_test"], arrays["y_test"]),
        num_classes=NUM_CLASSES,
        input_shape=(1, SIGNAL_LENGTH),
    )


def _read_cache(path: Path, num_train: int, num_test: int) -> dict[str, np.ndarray] | None:
    """The cached arrays, or None when the file is absent or unusable (then we regenerate)."""
    if not path.exists():
        return None
    expected = {
        "x_train": ((num_train, 1, SIGNAL_LENGTH), np.float32),
        "y_train": ((num_train,), np.int64),
        "x_test": ((num_test, 1, SIGNAL_LENGTH), np.float32),
        "y_test": ((num_test,), np.int64),
    }
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {key: f[key] for key in expected}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        log.warning("MNIST-1D cache %s is unreadable (%s); regenerating", path, e)
        return None
    for key, (shape, dtype) in expected.items():
        if arrays[key].shape != shape or arrays[key].dtype != dtype:
            log.warning("MNIST-1D cache %s has a bad %r array; regenerating", path, key)
            return None
    return arrays


def _generate(seed: int, num_train: int, num_test: int) -> dict[str, np.ndarray]:
    # Imported here: the package pulls in matplotlib, which costs a second at import time.
    from mnist1d.data import get_dataset_args, make_dataset

    total = num_train + num_test
    args = get_dataset_args()
    # make_dataset makes num_samples // 10 signals per class; round up, then trim below.
    args.num_samples = -(-total // NUM_CLASSES) * NUM_CLASSES
    args.train_split = num_train / args.num_samples
    args.seed = seed
    # make_dataset reseeds the global RNGs; keep callers' random streams untouched.
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    # make_dataset shuffles before splitting, so re-slicing the concatenation stays unbiased
    # and gives exact sizes even where its float split point rounds the other way.
    # reshape, not [:, None, :]: the latter gives the channel axis stride 0.
    x = np.concatenate([data["x"], data["x_test"]]).astype(np.float32)
    x = x.reshape(len(x), 1, SIGNAL_LENGTH)
    y = np.concatenate([data["y"], data["y_test"]]).astype(np.int64)
    return {
        "x_train": x[:num_train],
        "y_train": y[:num_train],
        "x_test": x[num_train:total],
        "y_test": y[num_train:total],
    }
