"""Partitioners on a synthetic pool: disjointness, coverage, skew, test mix, label flips."""

from __future__ import annotations

import numpy as np
import pytest

from collabfl.client.data import (
    ArrayDataset,
    DataPool,
    Partition,
    client_datasets,
    make_partition,
    schemes,
)

NUM_CLASSES = 10


def _pool(per_class_train: int = 200, per_class_test: int = 100, name: str = "toy") -> DataPool:
    """Balanced labels; each sample's single feature is its own index, to trace it."""

    def split(per_class: int) -> ArrayDataset:
        y = np.repeat(np.arange(NUM_CLASSES, dtype=np.int64), per_class)
        y = np.random.default_rng(0).permutation(y)
        x = np.arange(len(y), dtype=np.float32).reshape(-1, 1, 1)
        return ArrayDataset(x, y)

    return DataPool(
        name=name,
        train=split(per_class_train),
        test=split(per_class_test),
        num_classes=NUM_CLASSES,
        input_shape=(1, 1),
    )


POOL = _pool()
COVERING = [
    ("iid", {}),
    ("dirichlet", {"alpha": 0.1}),
    ("dirichlet", {"alpha": 100.0}),
    ("pathological", {"classes_per_client": 2}),
    ("pathological", {"classes_per_client": 1}),
]


def _local(partition: Partition) -> list[np.ndarray]:
    return [np.concatenate([c.train, c.val]) for c in partition.clients]


def _class_shares(labels: np.ndarray) -> np.ndarray:
    return np.bincount(labels, minlength=NUM_CLASSES) / len(labels)


@pytest.mark.parametrize(("scheme", "params"), COVERING)
def test_disjoint_and_covering(scheme: str, params: dict) -> None:
    partition = make_partition(POOL, num_clients=20, scheme=scheme, seed=0, **params)
    assert len(partition.clients) == 20
    everything = np.concatenate(_local(partition))
    assert len(everything) == len(np.unique(everything)) == len(POOL.train)
    for c in partition.clients:
        assert len(c.train) >= 1 and len(c.val) >= 1
        assert not set(c.train.tolist()) & set(c.val.tolist())
        assert c.train.dtype == c.val.dtype == c.test.dtype == np.int64
        assert len(np.unique(c.test)) == len(c.test)  # no repeated test sample in a client
        assert c.label_permutation is None


def test_iid_sizes_are_near_equal() -> None:
    partition = make_partition(POOL, num_clients=7, scheme="iid", seed=0)
    sizes = [len(x) for x in _local(partition)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 2000


def test_val_fraction_sets_validation_size() -> None:
    partition = make_partition(POOL, num_clients=10, scheme="iid", seed=0, val_fraction=0.25)
    assert [len(c.val) for c in partition.clients] == [50] * 10
    assert [len(c.train) for c in partition.clients] == [150] * 10


@pytest.mark.parametrize(
    ("scheme", "params"), [*COVERING, ("dirichlet", {"alpha": 0.5, "label_flip_fraction": 0.5})]
)
def test_same_arguments_same_partition_and_seed_matters(scheme: str, params: dict) -> None:
    a = make_partition(POOL, num_clients=10, scheme=scheme, seed=7, **params)
    b = make_partition(POOL, num_clients=10, scheme=scheme, seed=7, **params)
    c = make_partition(POOL, num_clients=10, scheme=scheme, seed=8, **params)
    assert a == b
    assert a != c
    assert a.meta["seed"] == 7 and a.meta["scheme"] == scheme


def _mean_max_share(partition: Partition) -> float:
    return float(np.mean([_class_shares(POOL.train.y[i]).max() for i in _local(partition)]))


def test_small_alpha_dirichlet_is_skewed_and_iid_is_not() -> None:
    iid = make_partition(POOL, num_clients=10, scheme="iid", seed=0)
    skewed = make_partition(POOL, num_clients=10, scheme="dirichlet", seed=0, alpha=0.1)
    mild = make_partition(POOL, num_clients=10, scheme="dirichlet", seed=0, alpha=1000.0)
    assert _mean_max_share(iid) < 0.2
    assert _mean_max_share(mild) < 0.2
    assert _mean_max_share(skewed) > 0.5


def test_dirichlet_gives_every_client_a_minimum() -> None:
    partition = make_partition(POOL, num_clients=40, scheme="dirichlet", seed=3, alpha=0.1)
    assert min(len(x) for x in _local(partition)) >= 10


def test_dirichlet_gives_up_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schemes, "MAX_DIRICHLET_ATTEMPTS", 50)  # keep the failure fast
    with pytest.raises(ValueError, match=r"no draw in 50 attempts.*larger alpha"):
        make_partition(POOL, num_clients=150, scheme="dirichlet", seed=0, alpha=0.001)


@pytest.mark.parametrize(("num_clients", "k"), [(20, 1), (20, 3), (7, 4), (3, 10)])
def test_pathological_gives_exactly_k_classes_balanced(num_clients: int, k: int) -> None:
    partition = make_partition(
        POOL, num_clients=num_clients, scheme="pathological", seed=1, classes_per_client=k
    )
    holders = np.zeros(NUM_CLASSES, dtype=int)
    for local in _local(partition):
        classes = np.unique(POOL.train.y[local])
        assert len(classes) == k
        holders[classes] += 1
    assert holders.max() - holders.min() <= 1


def test_pathological_leaves_unheld_classes_out() -> None:
    partition = make_partition(POOL, num_clients=2, scheme="pathological", seed=0)
    held = np.unique(POOL.train.y[np.concatenate(_local(partition))])
    assert len(held) == 6
    assert sum(len(x) for x in _local(partition)) == 6 * 200


def test_pathological_too_few_samples_is_a_clear_error() -> None:
    tiny = _pool(per_class_train=4)  # each class gets 6 holders: 20 clients x 3 classes / 10
    with pytest.raises(ValueError, match="has 4 samples, too few for its 6 holders"):
        make_partition(tiny, num_clients=20, scheme="pathological", seed=0, classes_per_client=3)


@pytest.mark.parametrize("test_ratio", [1.0, 0.5])
def test_test_split_follows_train_label_mix(test_ratio: float) -> None:
    partition = make_partition(
        POOL, num_clients=10, scheme="dirichlet", seed=2, alpha=0.3, test_ratio=test_ratio
    )
    for c in partition.clients:
        train_labels, test_labels = POOL.train.y[c.train], POOL.test.y[c.test]
        assert set(test_labels.tolist()) == set(train_labels.tolist())
        target = round(test_ratio * (len(c.train) + len(c.val)))
        assert abs(len(c.test) - target) <= NUM_CLASSES
        # Off by at most the one-per-class floor and a rounding step per class.
        diff = np.abs(_class_shares(train_labels) - _class_shares(test_labels))
        assert diff.max() < 0.05


def test_test_split_is_capped_by_test_pool() -> None:
    small_test = _pool(per_class_test=5)
    partition = make_partition(small_test, num_clients=2, scheme="pathological", seed=0)
    for c in partition.clients:
        counts = np.bincount(small_test.test.y[c.test], minlength=NUM_CLASSES)
        assert counts.max() == 5 and (counts > 0).sum() == 3


@pytest.mark.parametrize(("fraction", "expected"), [(0.3, 3), (0.25, 2), (1.0, 10), (0.0, 0)])
def test_label_flip_picks_round_fraction_with_one_derangement(
    fraction: float, expected: int
) -> None:
    partition = make_partition(
        POOL, num_clients=10, scheme="iid", seed=4, label_flip_fraction=fraction
    )
    perms = [c.label_permutation for c in partition.clients if c.label_permutation is not None]
    assert len(perms) == expected
    assert len(partition.meta["malicious_clients"]) == expected
    for perm in perms:
        np.testing.assert_array_equal(perm, perms[0])
        assert sorted(perm.tolist()) == list(range(NUM_CLASSES))
        assert not np.any(perm == np.arange(NUM_CLASSES))


def test_label_flip_does_not_move_the_data() -> None:
    clean = make_partition(POOL, num_clients=10, scheme="dirichlet", seed=4, alpha=0.5)
    flipped = make_partition(
        POOL, num_clients=10, scheme="dirichlet", seed=4, alpha=0.5, label_flip_fraction=0.4
    )
    for a, b in zip(clean.clients, flipped.clients, strict=True):
        np.testing.assert_array_equal(a.train, b.train)
        np.testing.assert_array_equal(a.test, b.test)


def test_client_datasets_apply_the_flip_to_every_split() -> None:
    partition = make_partition(POOL, num_clients=10, scheme="iid", seed=5, label_flip_fraction=0.3)
    data = client_datasets(POOL, partition)
    assert [d.client_id for d in data] == list(range(10))
    assert [k for k, d in enumerate(data) if d.malicious] == partition.meta["malicious_clients"]
    for d, split in zip(data, partition.clients, strict=True):
        perm = split.label_permutation
        for mine, pool_part, idx in (
            (d.train, POOL.train, split.train),
            (d.val, POOL.train, split.val),
            (d.test, POOL.test, split.test),
        ):
            # x holds each sample's own index, so the right samples were taken.
            np.testing.assert_array_equal(mine.x[:, 0, 0], idx.astype(np.float32))
            expected = pool_part.y[idx] if perm is None else perm[pool_part.y[idx]]
            np.testing.assert_array_equal(mine.y, expected)
        if perm is not None:
            assert np.all(d.train.y != POOL.train.y[split.train])


def test_client_datasets_rejects_a_partition_of_another_pool() -> None:
    partition = make_partition(POOL, num_clients=4, scheme="iid", seed=0)
    with pytest.raises(ValueError, match="differs in name"):
        client_datasets(_pool(name="other"), partition)
    with pytest.raises(ValueError, match="num_train"):
        client_datasets(_pool(per_class_train=100), partition)


def test_natural_scheme_needs_groups() -> None:
    with pytest.raises(ValueError, match="writer groups"):
        make_partition(POOL, num_clients=2, scheme="natural", seed=0)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"num_clients": 0}, r"num_clients must be an integer in \[1, 1000\]"),
        ({"num_clients": 1001}, "num_clients"),
        ({"num_clients": 2.5}, "num_clients"),
        ({"scheme": "bogus"}, "scheme must be one of iid, dirichlet, pathological, natural"),
        ({"seed": -1}, "seed"),
        ({"alpha": 0.0}, r"alpha must be > 0"),
        ({"classes_per_client": 0}, r"classes_per_client must be an integer in \[1, 10\]"),
        ({"classes_per_client": 11}, "classes_per_client"),
        ({"val_fraction": 0.0}, r"val_fraction must be in \(0, 1\)"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"test_ratio": 0.0}, r"test_ratio must be > 0"),
        ({"label_flip_fraction": -0.1}, r"label_flip_fraction must be in \[0, 1\]"),
        ({"label_flip_fraction": 1.5}, "label_flip_fraction"),
    ],
)
def test_invalid_arguments_name_the_field(override: dict, field: str) -> None:
    args = {"num_clients": 4, "scheme": "dirichlet", "seed": 0, **override}
    with pytest.raises(ValueError, match=field):
        make_partition(POOL, **args)
