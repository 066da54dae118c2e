"""Partition files: a saved partition loads back equal; anything else is refused clearly."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from collabfl.client.data import (
    ArrayDataset,
    ClientSplit,
    DataPool,
    Partition,
    make_partition,
)


def _pool() -> DataPool:
    rng = np.random.default_rng(0)
    y_train, y_test = rng.integers(0, 5, 300), rng.integers(0, 5, 150)
    return DataPool(
        name="toy",
        train=ArrayDataset(rng.normal(size=(300, 2)).astype(np.float32), y_train),
        test=ArrayDataset(rng.normal(size=(150, 2)).astype(np.float32), y_test),
        num_classes=5,
        input_shape=(2,),
    )


@pytest.fixture
def partition() -> Partition:
    return make_partition(
        _pool(), num_clients=6, scheme="dirichlet", seed=3, alpha=0.5, label_flip_fraction=0.5
    )


def test_round_trip_is_equal(tmp_path: Path, partition: Partition) -> None:
    path = tmp_path / "runs" / "partition.npz"
    partition.save(path)
    loaded = Partition.load(path)
    assert loaded == partition
    assert loaded.meta == partition.meta
    assert loaded.meta["scheme"] == "dirichlet" and loaded.meta["pool"]["name"] == "toy"
    assert sum(c.label_permutation is not None for c in loaded.clients) == 3
    for a, b in zip(partition.clients, loaded.clients, strict=True):
        for split in ("train", "val", "test"):
            np.testing.assert_array_equal(getattr(a, split), getattr(b, split))
            assert getattr(b, split).dtype == np.int64


def test_saved_file_is_plain_npz_without_pickles(tmp_path: Path, partition: Partition) -> None:
    path = tmp_path / "p.npz"
    partition.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npz"]  # no temp files left
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    assert all(a.dtype != object for a in arrays.values())
    assert json.loads(str(arrays["meta"])) == partition.meta


def test_equality_notices_a_changed_index(partition: Partition) -> None:
    first = partition.clients[0]
    changed = ClientSplit(first.train + 1, first.val, first.test, first.label_permutation)
    assert Partition([changed, *partition.clients[1:]], partition.meta) != partition
    unflipped = ClientSplit(first.train, first.val, first.test, None)
    flipped = ClientSplit(first.train, first.val, first.test, np.arange(5)[::-1])
    assert unflipped != flipped


def test_numpy_scalar_arguments_still_save(tmp_path: Path) -> None:
    partition = make_partition(
        _pool(),
        num_clients=np.int64(3),
        scheme="pathological",
        seed=np.int64(1),
        classes_per_client=np.int64(2),
        val_fraction=np.float32(0.25),
    )
    partition.save(tmp_path / "p.npz")
    assert Partition.load(tmp_path / "p.npz") == partition
    assert type(partition.meta["seed"]) is int


def test_not_a_zip_file(tmp_path: Path) -> None:
    path = tmp_path / "p.npz"
    path.write_text("hello")
    with pytest.raises(ValueError, match="not a partition file"):
        Partition.load(path)


def test_npz_of_something_else(tmp_path: Path) -> None:
    path = tmp_path / "p.npz"
    np.savez(path, x=np.zeros(3))
    with pytest.raises(ValueError, match=r"expected format 'collabfl\.partition/1'"):
        Partition.load(path)


def _rewrite_without(src: Path, dst: Path, drop: str) -> None:
    with np.load(src, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files if k != drop}
    np.savez(dst, **arrays)


@pytest.mark.parametrize("key", ["val_offsets", "test_indices", "malicious", "meta"])
def test_missing_key_is_named(tmp_path: Path, partition: Partition, key: str) -> None:
    partition.save(tmp_path / "good.npz")
    _rewrite_without(tmp_path / "good.npz", tmp_path / "bad.npz", key)
    with pytest.raises(ValueError, match=key):
        Partition.load(tmp_path / "bad.npz")


def test_inconsistent_offsets_are_refused(tmp_path: Path, partition: Partition) -> None:
    partition.save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["train_offsets"] = arrays["train_offsets"][:-1]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="inconsistent 'train' offsets"):
        Partition.load(tmp_path / "bad.npz")


def test_object_arrays_are_not_unpickled(tmp_path: Path) -> None:
    path = tmp_path / "p.npz"
    np.savez(path, format=np.asarray("collabfl.partition/1"), meta=np.asarray([{}], dtype=object))
    with pytest.raises(ValueError, match="not a partition file"):
        Partition.load(path)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Partition.load(tmp_path / "absent.npz")


def test_save_replaces_an_existing_file(tmp_path: Path, partition: Partition) -> None:
    path = tmp_path / "p.npz"
    path.write_text("old")
    partition.save(path)
    assert zipfile.is_zipfile(path)
    assert Partition.load(path) == partition
