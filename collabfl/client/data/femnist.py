"""FEMNIST from LEAF's json files, keeping the natural split by writer.

LEAF writes ``root/train/*.json`` and ``root/test/*.json``; each file holds some writers'
samples as ``{"users": [...], "num_samples": [...], "user_data": {user: {"x", "y"}}}`` and a
writer's train and test samples sit in the matching train and test files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import ArrayDataset, DataPool

NUM_CLASSES = 62
INPUT_SHAPE = (1, 28, 28)
_PIXELS = 28 * 28


def load_femnist(root: Path) -> DataPool:
    """All writers' samples, with one index group per writer that has training samples.

    Writers keep the order in which they appear in the train files (sorted by file name);
    ``test_groups[k]`` holds writer k's test samples (empty if it has none). Samples of
    writers that appear only in the test files stay in the test pool, in no group.
    """
    root = Path(root)
    train_owners, train = _read_split(root / "train")
    test_owners, test = _read_split(root / "test")
    writers = list(dict.fromkeys(train_owners))
    train_groups = _groups(writers, train_owners)
    test_groups = _groups(writers, test_owners)
    return DataPool(
        name="femnist",
        train=train,
        test=test,
        num_classes=NUM_CLASSES,
        input_shape=INPUT_SHAPE,
        train_groups=train_groups,
        test_groups=test_groups,
    )


def _groups(writers: list[str], owner: list[str]) -> list[np.ndarray]:
    """For each writer, the indices of samples whose ``owner`` is that writer."""
    by_writer: dict[str, list[int]] = {w: [] for w in writers}
    for i, w in enumerate(owner):
        if w in by_writer:
            by_writer[w].append(i)
    return [np.asarray(by_writer[w], dtype=np.int64) for w in writers]


def _read_split(folder: Path) -> tuple[list[str], ArrayDataset]:
    """Samples of every json file in ``folder`` and, per sample, its writer."""
    if not folder.is_dir():
        raise FileNotFoundError(f"FEMNIST folder not found: expected {folder}")
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"FEMNIST: no .json files in {folder}")
    owners: list[str] = []
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for path in files:
        for user, x, y in _read_file(path):
            owners.extend([user] * len(y))
            xs.append(x)
            ys.append(y)
    x_all = np.concatenate(xs) if xs else np.zeros((0, _PIXELS), dtype=np.float32)
    y_all = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
    return owners, ArrayDataset(x_all.reshape(-1, *INPUT_SHAPE), y_all)


def _read_file(path: Path) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid json ({e})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("users"), list):
        raise ValueError(f"{path}: expected an object with a 'users' list")
    user_data = doc.get("user_data")
    if not isinstance(user_data, dict):
        raise ValueError(f"{path}: expected an object with a 'user_data' mapping")
    counts = doc.get("num_samples")
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(doc["users"])):
        raise ValueError(f"{path}: 'num_samples' must list one count per user")
    for k, user in enumerate(doc["users"]):
        if user not in user_data:
            raise ValueError(f"{path}: user {user!r} has no entry in 'user_data'")
        x, y = _user_arrays(path, user, user_data[user])
        if counts is not None and counts[k] != len(y):
            raise ValueError(
                f"{path}: user {user!r} has {len(y)} samples but 'num_samples' says {counts[k]}"
            )
        yield str(user), x, y


def _user_arrays(path: Path, user: str, data: Any) -> tuple[np.ndarray, np.ndarray]:
    where = f"{path}: user {user!r}"
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise ValueError(f"{where}: expected an object with 'x' and 'y'")
    try:
        x = np.asarray(data["x"], dtype=np.float32)
        y = np.asarray(data["y"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: 'x' must be lists of {_PIXELS} numbers") from e
    if y.size and y.dtype.kind not in "iu":
        raise ValueError(f"{where}: 'y' must be a list of integers")
    y = y.astype(np.int64)
    if x.size == 0:
        x = x.reshape(0, _PIXELS)
    if x.ndim != 2 or x.shape[1] != _PIXELS:
        raise ValueError(f"{where}: each sample in 'x' must have {_PIXELS} values")
    if y.shape != (len(x),):
        raise ValueError(f"{where}: {len(x)} samples in 'x' but 'y' has shape {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= NUM_CLASSES):
        raise ValueError(f"{where}: labels must lie in [0, {NUM_CLASSES})")
    return x, y
