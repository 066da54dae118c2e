"""load_pool dispatch and the invariants of the sample containers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collabfl.client.data import ArrayDataset, DataPool, load_pool


def test_unknown_dataset_lists_valid_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mnist1d, cifar10, cinic10, femnist") as info:
        load_pool("imagenet", cache_dir=tmp_path)
    assert "'imagenet'" in str(info.value)


@pytest.mark.parametrize("name", ["cifar10", "cinic10", "femnist"])
def test_path_datasets_require_root(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=f"root is required for dataset '{name}'"):
        load_pool(name, cache_dir=tmp_path)


def test_subset_takes_the_indexed_samples() -> None:
    data = ArrayDataset(np.arange(12, dtype=np.float32).reshape(6, 1, 2), np.arange(6) % 3)
    part = data.subset(np.asarray([4, 1]))
    assert len(part) == 2
    np.testing.assert_array_equal(part.x[:, 0, 0], [8.0, 2.0])
    np.testing.assert_array_equal(part.y, [1, 1])
    assert len(data.subset(np.zeros(0, dtype=np.int64))) == 0


@pytest.mark.parametrize(
    ("x", "y", "message"),
    [
        (np.zeros((3, 2)), np.zeros(3, np.int64), "float32"),
        (np.zeros((3, 2), np.float32), np.zeros(3, np.int32), "int64"),
        (np.zeros((3, 2), np.float32), np.zeros(2, np.int64), "3 samples but y has 2"),
    ],
)
def test_array_dataset_rejects_wrong_types(x: np.ndarray, y: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ArrayDataset(x, y)


def _data(n: int, shape: tuple[int, ...], top_label: int) -> ArrayDataset:
    return ArrayDataset(
        np.zeros((n, *shape), np.float32), np.arange(n, dtype=np.int64) % (top_label + 1)
    )


def test_pool_checks_shapes_and_labels() -> None:
    with pytest.raises(ValueError, match="expected"):
        DataPool("p", _data(4, (1, 3), 1), _data(2, (1, 4), 1), num_classes=2, input_shape=(1, 3))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        DataPool("p", _data(4, (3,), 2), _data(2, (3,), 1), num_classes=2, input_shape=(3,))
    with pytest.raises(ValueError, match="together"):
        DataPool("p", _data(4, (3,), 1), _data(2, (3,), 1), 2, (3,), train_groups=[np.arange(4)])
