"""FEMNIST from tiny LEAF json files, and the natural (one client per writer) partition."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from collabfl.client.data import client_datasets, load_pool, make_partition

# writer -> (train samples, test samples); w2 has no test samples, w4 only one train sample.
WRITERS = {"w0": (5, 2), "w1": (3, 1), "w2": (4, 0), "w3": (6, 3), "w4": (1, 1)}
FILES = {"part_a.json": ["w0", "w1", "w2"], "part_b.json": ["w3", "w4"]}


def _pixel(writer: str) -> float:
    """Every pixel of a writer's samples has this value, so samples reveal their writer."""
    return int(writer[1:]) / 10


def _user_data(writer: str, n: int) -> dict[str, list]:
    return {
        "x": [[_pixel(writer)] * 784 for _ in range(n)],
        "y": [(int(writer[1:]) * 7 + i) % 62 for i in range(n)],
    }


def _write_leaf(root: Path) -> None:
    for split, column in (("train", 0), ("test", 1)):
        (root / split).mkdir(parents=True)
        for name, users in FILES.items():
            doc = {
                "users": users,
                "num_samples": [WRITERS[u][column] for u in users],
                "user_data": {u: _user_data(u, WRITERS[u][column]) for u in users},
            }
            (root / split / name).write_text(json.dumps(doc))


@pytest.fixture
def pool(tmp_path: Path):
    _write_leaf(tmp_path / "leaf")
    return load_pool("femnist", root=tmp_path / "leaf", cache_dir=tmp_path / "cache")


def test_loads_samples_and_writer_groups(pool) -> None:
    assert pool.name == "femnist" and pool.num_classes == 62
    assert pool.input_shape == (1, 28, 28)
    assert pool.train.x.shape == (19, 1, 28, 28) and pool.test.x.shape == (7, 1, 28, 28)
    assert pool.train.x.dtype == np.float32 and pool.train.y.dtype == np.int64
    assert len(pool.train_groups) == len(pool.test_groups) == 5
    for k, writer in enumerate(WRITERS):  # writers keep their order of appearance
        train_group, test_group = pool.train_groups[k], pool.test_groups[k]
        assert (len(train_group), len(test_group)) == WRITERS[writer]
        assert np.all(pool.train.x[train_group] == np.float32(_pixel(writer)))
        assert np.all(pool.test.x[test_group] == np.float32(_pixel(writer)))
        assert pool.train.y[train_group].tolist() == _user_data(writer, WRITERS[writer][0])["y"]


def test_natural_partition_maps_writers_to_clients(pool) -> None:
    partition = make_partition(pool, num_clients=3, scheme="natural", seed=5, val_fraction=0.3)
    writers = partition.meta["writers"]
    # w2 (no test samples) and w4 (one train sample) cannot be clients.
    assert len(set(writers)) == 3 and set(writers) <= {0, 1, 3}
    for k, (split, data) in enumerate(
        zip(partition.clients, client_datasets(pool, partition), strict=True)
    ):
        w = writers[k]
        local = np.concatenate([split.train, split.val])
        assert sorted(local.tolist()) == pool.train_groups[w].tolist()
        assert len(split.val) >= 1 and len(split.train) >= 1
        assert sorted(split.test.tolist()) == pool.test_groups[w].tolist()
        assert np.all(data.test.x == np.float32(w / 10))
        assert np.all(data.train.x == np.float32(w / 10))


def test_natural_partition_is_deterministic(pool) -> None:
    a = make_partition(pool, num_clients=2, scheme="natural", seed=1)
    b = make_partition(pool, num_clients=2, scheme="natural", seed=1)
    assert a == b
    chosen = {
        tuple(make_partition(pool, num_clients=2, scheme="natural", seed=s).meta["writers"])
        for s in range(10)
    }
    assert len(chosen) > 1  # the seed decides which writers are picked


def test_natural_needs_enough_eligible_writers(pool) -> None:
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 3\]"):
        make_partition(pool, num_clients=4, scheme="natural", seed=0)


def test_writer_only_in_test_files_is_kept_out_of_groups(tmp_path: Path) -> None:
    _write_leaf(tmp_path)
    doc = {"users": ["extra"], "user_data": {"extra": {"x": [[0.5] * 784], "y": [3]}}}
    (tmp_path / "test" / "part_c.json").write_text(json.dumps(doc))
    pool = load_pool("femnist", root=tmp_path, cache_dir=tmp_path)
    assert len(pool.test) == 8
    assert sum(len(g) for g in pool.test_groups) == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid json"),
        ("[1, 2]", "'users' list"),
        ('{"users": ["a"]}', "'user_data'"),
        ('{"users": ["a"], "user_data": {}}', "'a' has no entry"),
        ('{"users": ["a"], "user_data": {"a": {"x": [[0.1, 0.2]], "y": [1]}}}', "784 values"),
        ('{"users": ["a"], "user_data": {"a": {"x": [[0.1], [0.2, 0.3]], "y": [1, 2]}}}', "784"),
        ('{"users": ["a"], "user_data": {"a": {"x": [], "y": [1]}}}', "'y' has shape"),
        ('{"users": ["a"], "user_data": {"a": {"x": [], "y": ["q"]}}}', "integers"),
        ('{"users": ["a"], "user_data": {"a": {"y": []}}}', "'x' and 'y'"),
        ('{"users": ["a"], "num_samples": [2], "user_data": {"a": {"x": [], "y": []}}}', "says 2"),
    ],
)
def test_malformed_json_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    _write_leaf(tmp_path)
    (tmp_path / "train" / "part_b.json").write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_pool("femnist", root=tmp_path, cache_dir=tmp_path)
    assert "part_b.json" in str(info.value)


def test_label_out_of_range_is_rejected(tmp_path: Path) -> None:
    _write_leaf(tmp_path)
    doc = {"users": ["a"], "user_data": {"a": {"x": [[0.0] * 784], "y": [62]}}}
    (tmp_path / "test" / "part_b.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 62\)"):
        load_pool("femnist", root=tmp_path, cache_dir=tmp_path)


def test_missing_split_folder_or_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"expected .*train"):
        load_pool("femnist", root=tmp_path, cache_dir=tmp_path)
    (tmp_path / "train").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no \.json files"):
        load_pool("femnist", root=tmp_path, cache_dir=tmp_path)
