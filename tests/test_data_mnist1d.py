"""MNIST-1D: offline generation, the on-disk cache, and determinism."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import numpy as np
import pytest

from collabfl.client.data import load_pool
from collabfl.client.data import mnist1d as mnist1d_module

SIZES = {"num_train": 203, "num_test": 101}  # not multiples of 10 on purpose


def _load(cache_dir: Path, seed: int = 0):
    return load_pool("mnist1d", cache_dir=cache_dir, seed=seed, **SIZES)


def _cache_files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.npz"))


def test_shapes_dtypes_and_classes(tmp_path: Path) -> None:
    pool = _load(tmp_path)
    assert pool.name == "mnist1d"
    assert pool.train.x.shape == (203, 1, 40)
    assert pool.test.x.shape == (101, 1, 40)
    assert pool.train.x.dtype == np.float32 and pool.train.y.dtype == np.int64
    assert pool.input_shape == (1, 40)
    assert pool.num_classes == 10
    assert set(np.unique(pool.train.y)) == set(range(10))
    assert pool.train_groups is None and pool.test_groups is None
    # Standardized signals, not raw templates or zeros.
    assert abs(float(np.concatenate([pool.train.x, pool.test.x]).std()) - 1.0) < 0.05


def test_generation_never_opens_a_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert len(_load(tmp_path).train) == 203


def test_cache_hit_returns_equal_arrays_without_regenerating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _load(tmp_path)
    assert len(_cache_files(tmp_path)) == 1

    def fail(*args: object) -> None:
        raise AssertionError("regenerated despite a valid cache")

    monkeypatch.setattr(mnist1d_module, "_generate", fail)
    second = _load(tmp_path)
    np.testing.assert_array_equal(first.train.x, second.train.x)
    np.testing.assert_array_equal(first.train.y, second.train.y)
    np.testing.assert_array_equal(first.test.x, second.test.x)
    np.testing.assert_array_equal(first.test.y, second.test.y)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong_shapes"])
def test_corrupted_cache_is_regenerated(tmp_path: Path, damage: str) -> None:
    first = _load(tmp_path)
    (path,) = _cache_files(tmp_path)
    if damage == "garbage":
        path.write_bytes(b"this is not an npz file")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:500])
    else:
        with path.open("wb") as f:
            np.savez(f, x_train=np.zeros(3), y_train=np.zeros(3))
    second = _load(tmp_path)
    np.testing.assert_array_equal(first.train.x, second.train.x)
    np.testing.assert_array_equal(first.test.y, second.test.y)
    # The bad file was replaced by a good one.
    with np.load(path, allow_pickle=False) as f:
        assert f["x_train"].shape == (203, 1, 40)


def test_deterministic_per_seed_and_seeds_differ(tmp_path: Path) -> None:
    a = _load(tmp_path / "a", seed=3)
    b = _load(tmp_path / "b", seed=3)
    c = _load(tmp_path / "c", seed=4)
    np.testing.assert_array_equal(a.train.x, b.train.x)
    np.testing.assert_array_equal(a.test.y, b.test.y)
    assert not np.array_equal(a.train.x, c.train.x)


def test_cache_is_keyed_by_seed_and_sizes(tmp_path: Path) -> None:
    _load(tmp_path, seed=0)
    _load(tmp_path, seed=1)
    load_pool("mnist1d", cache_dir=tmp_path, seed=0, num_train=50, num_test=20)
    assert len(_cache_files(tmp_path)) == 3


def test_callers_global_random_state_is_untouched(tmp_path: Path) -> None:
    np.random.seed(1234)
    random.seed(1234)
    np_before, py_before = np.random.get_state(), random.getstate()
    _load(tmp_path)
    np_after, py_after = np.random.get_state(), random.getstate()
    np.testing.assert_array_equal(np_before[1], np_after[1])
    assert np_before[2] == np_after[2]
    assert py_before == py_after


def test_sizes_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="num_train"):
        load_pool("mnist1d", cache_dir=tmp_path, num_train=0, num_test=10)


def test_a_fresh_cache_serves_what_a_warm_one_does(tmp_path: Path) -> None:
    """The first run (data generated) and every later one (data read) see identical arrays,
    down to the memory layout: a torch kernel may pick its path by strides, and a layout
    difference once made a fresh clone's results differ from every run after it."""
    fresh = _load(tmp_path)
    cached = _load(tmp_path)
    for split in ("train", "test"):
        for field in ("x", "y"):
            a, b = getattr(getattr(fresh, split), field), getattr(getattr(cached, split), field)
            np.testing.assert_array_equal(a, b)
            assert a.strides == b.strides, (split, field)
    assert fresh.train.x.strides == (4 * 40, 4 * 40, 4)  # no stride-0 channel axis
    picked = np.arange(0, 203, 3)
    assert fresh.train.subset(picked).x.strides == cached.train.subset(picked).x.strides
