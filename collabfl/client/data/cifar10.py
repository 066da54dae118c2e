"""CIFAR-10 from the on-disk layout that torchvision downloads (``cifar-10-batches-py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .arrays import ArrayDataset, DataPool
from .images import CIFAR10_MEAN, CIFAR10_STD, normalize_rgb
from .safe_pickle import ForbiddenGlobalError, load_array_pickle

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"
NUM_CLASSES = 10
_PIXELS = 3 * 32 * 32


def load_cifar10(root: Path) -> DataPool:
    """The 50,000 training and 10,000 test images under ``root/cifar-10-batches-py``."""
    folder = Path(root) / FOLDER
    if not folder.is_dir():
        raise FileNotFoundError(f"CIFAR-10 folder not found: expected {folder}")
    missing = [n for n in (*TRAIN_BATCHES, TEST_BATCH, META) if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"CIFAR-10 files missing in {folder}: {', '.join(missing)}")
    _check_meta(folder / META)
    train = [_read_batch(folder / n) for n in TRAIN_BATCHES]
    return DataPool(
        name="cifar10",
        train=ArrayDataset(
            np.concatenate([b.x for b in train]), np.concatenate([b.y for b in train])
        ),
        test=_read_batch(folder / TEST_BATCH),
        num_classes=NUM_CLASSES,
        input_shape=(3, 32, 32),
    )


def _read_batch(path: Path) -> ArrayDataset:
    batch = _load_dict(path)
    data, labels = batch.get("data"), batch.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise ValueError(f"{path}: 'data' must be a 2-D uint8 array")
    if data.shape[1] != _PIXELS:
        raise ValueError(f"{path}: 'data' rows must have {_PIXELS} values, got {data.shape[1]}")
    try:
        y = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: 'labels' must be a list of integers") from e
    if y.shape != (len(data),):
        raise ValueError(f"{path}: {len(data)} images but 'labels' has shape {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= NUM_CLASSES):
        raise ValueError(f"{path}: labels must lie in [0, {NUM_CLASSES})")
    x = normalize_rgb(data.reshape(-1, 3, 32, 32), CIFAR10_MEAN, CIFAR10_STD)
    return ArrayDataset(x, y)


def _check_meta(path: Path) -> None:
    names = _load_dict(path).get("label_names")
    if not isinstance(names, list) or len(names) != NUM_CLASSES:
        raise ValueError(f"{path}: expected 'label_names' listing {NUM_CLASSES} classes")


def _load_dict(path: Path) -> dict[str, Any]:
    """A batch file's dict with str keys (Python 2 wrote them as byte strings)."""
    try:
        obj = load_array_pickle(path)
    except ForbiddenGlobalError:
        raise
    except Exception as e:  # truncated or otherwise corrupt pickles fail in many ways
        raise ValueError(f"{path}: not a readable CIFAR-10 pickle ({e})") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}
