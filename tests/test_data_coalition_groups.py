"""FedCollab-style group partitions: large and small clients under label, feature and
concept shift, the rotation of inputs, and which clients count as malicious."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from collabfl.client.data import (
    ArrayDataset,
    DataPool,
    Partition,
    client_datasets,
    load_pool,
    make_partition,
    schemes,
)
from collabfl.client.data.client_file import load_client_file, save_client_file
from collabfl.client.data.clients import rotate
from collabfl.engine.config import ConfigError, load_config

GROUP_SCHEMES = ("label_groups", "feature_groups", "concept_groups")
GROUPS_OF_20 = [0] * 5 + [1] * 5 + [2] * 5 + [3] * 5


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> DataPool:
    """A real MNIST-1D pool, small enough to generate in about two seconds."""
    cache = tmp_path_factory.mktemp("mnist1d")
    return load_pool("mnist1d", cache_dir=cache, seed=0, num_train=4000, num_test=2000)


def _image_pool(n_train: int = 400, n_test: int = 200, side: int = 8) -> DataPool:
    rng = np.random.default_rng(0)

    def split(n: int) -> ArrayDataset:
        x = rng.normal(size=(n, 1, side, side)).astype(np.float32)
        return ArrayDataset(x, rng.integers(0, 10, n))

    return DataPool("images", split(n_train), split(n_test), 10, (1, side, side))


def _local(partition: Partition) -> list[np.ndarray]:
    return [np.concatenate([c.train, c.val]) for c in partition.clients]


def _histogram(labels: np.ndarray, num_classes: int) -> np.ndarray:
    return np.bincount(labels, minlength=num_classes) / len(labels)


def _tv(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p - q).sum())


@pytest.mark.parametrize("scheme", GROUP_SCHEMES)
def test_large_clients_hold_size_ratio_times_the_small_ones(pool: DataPool, scheme: str) -> None:
    partition = make_partition(pool, num_clients=20, scheme=scheme, seed=0)
    meta = partition.meta
    assert meta["groups"] == GROUPS_OF_20
    assert meta["size_ratio"] == 4.0
    small, large = meta["samples_per_client"]["small"], meta["samples_per_client"]["large"]
    assert large == 4 * small
    sizes = [len(x) for x in _local(partition)]
    assert sizes == [large] * 10 + [small] * 10
    everything = np.concatenate(_local(partition))
    assert len(np.unique(everything)) == len(everything) <= len(pool.train)
    assert json.loads(json.dumps(meta)) == meta  # plain JSON types only


@pytest.mark.parametrize("scheme", ["feature_groups", "concept_groups"])
def test_shared_pool_schemes_take_the_largest_sizes_that_fit(pool: DataPool, scheme: str) -> None:
    partition = make_partition(pool, num_clients=10, scheme=scheme, seed=1, size_ratio=2.5)
    assert partition.meta["groups"] == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    small = partition.meta["samples_per_client"]["small"]
    large = partition.meta["samples_per_client"]["large"]
    assert large == int(np.floor(2.5 * small + 0.5))

    def total(s: int) -> int:
        return 6 * schemes.large_size(s, 2.5) + 4 * s

    assert total(small) <= len(pool.train) < total(small + 1)
    # Labels are drawn from the whole pool, so every client sees the pool's label mix.
    pool_mix = _histogram(pool.train.y, 10)
    for idx in _local(partition)[:6]:
        assert _tv(_histogram(pool.train.y[idx], 10), pool_mix) < 0.15


def test_label_groups_have_three_levels_of_distance(pool: DataPool) -> None:
    partition = make_partition(pool, num_clients=20, scheme="label_groups", seed=0)
    hist = [_histogram(pool.train.y[idx], 10) for idx in _local(partition)]
    groups = partition.meta["groups"]

    def mean_tv(a: int, b: int) -> float:
        pairs = [
            (i, j)
            for i, j in itertools.combinations(range(20), 2)
            if {groups[i], groups[j]} == {a, b}
        ]
        return float(np.mean([_tv(hist[i], hist[j]) for i, j in pairs]))

    within = max(mean_tv(g, g) for g in range(4))
    across_large = mean_tv(0, 1)
    large_small = min(mean_tv(a, b) for a in (0, 1) for b in (2, 3))
    assert within < 0.05
    assert within < across_large < large_small
    assert large_small == pytest.approx(1.0)  # no class in common
    assert mean_tv(2, 3) < 0.05  # the two small groups are alike
    classes = partition.meta["group_classes"]
    assert classes == [[0, 1, 2, 3, 4], [3, 4, 5, 6, 7], [8, 9], [8, 9]]
    for c, g in zip(partition.clients, groups, strict=True):
        # Test splits follow the client's own label mix.
        assert set(np.unique(pool.test.y[c.test]).tolist()) == set(classes[g])
        assert c.label_permutation is None and c.rotation_degrees is None


@pytest.mark.parametrize("num_classes", range(4, 41))
def test_label_group_classes_rule_holds_for_any_class_count(num_classes: int) -> None:
    g0, g1, g2, g3 = (set(c) for c in schemes.label_group_classes(num_classes))
    assert len(g0) == len(g1) >= 2
    assert g0 & g1 and g0 != g1  # overlapping large groups
    assert g2 == g3 and g2 and not g2 & (g0 | g1)  # small groups alike, apart from large
    assert g0 | g1 | g2 == set(range(num_classes))


def test_signals_rotate_by_an_exact_circular_shift() -> None:
    x = np.random.default_rng(0).normal(size=(5, 1, 40)).astype(np.float32)
    for degrees, shift in [(25.0, 3), (-25.0, -3), (155.0, 17), (-155.0, -17), (360.0, 40)]:
        np.testing.assert_array_equal(rotate(x, degrees), np.roll(x, shift, axis=-1))
    flat = x[:, 0, :]
    np.testing.assert_array_equal(rotate(flat, 90.0), np.roll(flat, 10, axis=-1))


def test_feature_groups_turn_every_split_of_a_signal_client(pool: DataPool) -> None:
    partition = make_partition(pool, num_clients=8, scheme="feature_groups", seed=2)
    assert partition.meta["group_rotation_degrees"] == [25.0, -25.0, 155.0, -155.0]
    shifts = {0: 3, 1: -3, 2: 17, 3: -17}  # round(angle / 360 * 40)
    for data, split, g in zip(
        client_datasets(pool, partition), partition.clients, partition.meta["groups"], strict=True
    ):
        assert split.rotation_degrees == schemes.GROUP_ROTATIONS[g]
        assert not data.malicious
        for mine, source, idx in (
            (data.train, pool.train, split.train),
            (data.val, pool.train, split.val),
            (data.test, pool.test, split.test),
        ):
            np.testing.assert_array_equal(mine.x, np.roll(source.x[idx], shifts[g], axis=-1))
            np.testing.assert_array_equal(mine.y, source.y[idx])


def test_image_rotation_by_90_degrees_is_exact_and_counter_clockwise() -> None:
    x = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6)
    np.testing.assert_allclose(rotate(x, 90.0), np.rot90(x, axes=(2, 3)), atol=1e-4)
    assert rotate(x[:0], 25.0).shape == (0, 3, 6, 6)


def _smooth_images(side: int = 32) -> np.ndarray:
    grid = np.linspace(-1, 1, side)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    image = np.sin(2 * xx + 1) * np.cos(3 * yy) + xx * yy
    return np.stack([image, -image])[:, None].astype(np.float32)


def test_image_rotation_there_and_back_restores_the_centre() -> None:
    x = _smooth_images()
    back = rotate(rotate(x, 25.0), -25.0)
    centre = (slice(None), slice(None), slice(10, 22), slice(10, 22))
    np.testing.assert_allclose(back[centre], x[centre], atol=0.02)
    assert np.abs(rotate(x, 25.0)[centre] - x[centre]).max() > 0.2


def _centroid(image: np.ndarray) -> np.ndarray:
    rows, cols = np.indices(image.shape)
    return np.asarray([(rows * image).sum(), (cols * image).sum()]) / image.sum()


def test_image_rotation_near_180_degrees_moves_the_mass_across() -> None:
    x = np.zeros((1, 1, 32, 32), dtype=np.float32)
    x[0, 0, 4:10, 4:10] = 1.0  # a bright square near the top-left corner
    turned = rotate(x, 155.0)[0, 0]
    before, after = _centroid(x[0, 0]) - 15.5, _centroid(turned) - 15.5
    # Counter-clockwise on screen, in (row, col) offsets from the centre.
    a = np.radians(155.0)
    turn = np.asarray([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    np.testing.assert_allclose(after, turn @ before, atol=0.3)
    assert before @ after < -0.8 * (before @ before)  # across the centre
    assert turned.sum() == pytest.approx(x.sum(), rel=0.05)


def test_non_square_images_turn_rigidly() -> None:
    x = np.zeros((1, 1, 20, 40), dtype=np.float32)
    x[0, 0, 9:11, 25:27] = 1.0  # 6 pixels right of the centre (9.5, 19.5)
    after = _centroid(rotate(x, 90.0)[0, 0]) - [9.5, 19.5]
    np.testing.assert_allclose(after, [-6.0, 0.0], atol=0.3)  # 6 above it, not 3


def test_feature_groups_rotate_images_in_every_split() -> None:
    images = _image_pool()
    partition = make_partition(images, num_clients=4, scheme="feature_groups", seed=0)
    for data, split in zip(client_datasets(images, partition), partition.clients, strict=True):
        angle = split.rotation_degrees
        np.testing.assert_array_equal(data.train.x, rotate(images.train.x[split.train], angle))
        np.testing.assert_array_equal(data.val.x, rotate(images.train.x[split.val], angle))
        np.testing.assert_array_equal(data.test.x, rotate(images.test.x[split.test], angle))


@pytest.mark.parametrize("num_classes", range(4, 41))
def test_concept_permutations_rule_holds_for_any_class_count(num_classes: int) -> None:
    identity = np.arange(num_classes)
    g0, g1, g2, g3 = schemes.concept_permutations(num_classes)
    for perm in (g0, g1, g2, g3):
        assert sorted(perm.tolist()) == identity.tolist()
    np.testing.assert_array_equal(g0, identity)
    agreed = int((g1 == identity).sum())
    assert agreed == min(round(0.7 * num_classes), num_classes - 2)
    np.testing.assert_array_equal(g2, g3)
    assert not np.any(g2 == identity) and not np.any(g2 == g1)


@pytest.mark.parametrize(("num_classes", "agreed"), [(10, 7), (20, 14), (4, 2)])
def test_concept_group_one_agrees_on_the_papers_share(num_classes: int, agreed: int) -> None:
    _, g1, _, _ = schemes.concept_permutations(num_classes)
    assert int((g1 == np.arange(num_classes)).sum()) == agreed


def test_concept_clients_are_honest_while_label_flip_clients_are_malicious(
    pool: DataPool,
) -> None:
    partition = make_partition(
        pool, num_clients=20, scheme="concept_groups", seed=3, label_flip_fraction=0.2
    )
    maps = [np.asarray(m) for m in partition.meta["group_label_permutations"]]
    flipped = partition.meta["malicious_clients"]
    assert len(flipped) == 4
    data = client_datasets(pool, partition)
    assert [k for k, d in enumerate(data) if d.malicious] == flipped
    for k, (d, split, g) in enumerate(
        zip(data, partition.clients, partition.meta["groups"], strict=True)
    ):
        concept = maps[g][pool.train.y[split.train]]
        assert split.malicious == (k in flipped)
        if k in flipped:
            assert np.all(d.train.y != concept)  # flipped on top of the group's own map
        else:
            np.testing.assert_array_equal(d.train.y, concept)
            np.testing.assert_array_equal(d.test.y, maps[g][pool.test.y[split.test]])
    honest = make_partition(pool, num_clients=20, scheme="concept_groups", seed=3)
    assert not any(d.malicious for d in client_datasets(pool, honest))
    assert all(c.label_permutation is not None for c in honest.clients)


def test_label_flip_still_marks_iid_clients_malicious(pool: DataPool) -> None:
    partition = make_partition(pool, num_clients=10, scheme="iid", seed=0, label_flip_fraction=0.3)
    marked = [k for k, c in enumerate(partition.clients) if c.malicious]
    assert marked == partition.meta["malicious_clients"] and len(marked) == 3


@pytest.mark.parametrize("scheme", GROUP_SCHEMES)
def test_same_arguments_same_partition(pool: DataPool, scheme: str) -> None:
    a = make_partition(pool, num_clients=8, scheme=scheme, seed=5)
    assert a == make_partition(pool, num_clients=8, scheme=scheme, seed=5)
    assert a != make_partition(pool, num_clients=8, scheme=scheme, seed=6)


@pytest.mark.parametrize("scheme", ["feature_groups", "concept_groups"])
def test_save_and_load_keep_rotation_and_malicious(
    pool: DataPool, tmp_path: Path, scheme: str
) -> None:
    partition = make_partition(pool, num_clients=8, scheme=scheme, seed=4, label_flip_fraction=0.25)
    partition.save(tmp_path / "p.npz")
    loaded = Partition.load(tmp_path / "p.npz")
    assert loaded == partition
    assert [c.malicious for c in loaded.clients] == [c.malicious for c in partition.clients]
    assert [c.rotation_degrees for c in loaded.clients] == [
        c.rotation_degrees for c in partition.clients
    ]
    assert sum(c.malicious for c in loaded.clients) == 2


def test_files_without_the_new_fields_still_load(pool: DataPool, tmp_path: Path) -> None:
    partition = make_partition(pool, num_clients=6, scheme="iid", seed=0, label_flip_fraction=0.5)
    partition.save(tmp_path / "new.npz")
    with np.load(tmp_path / "new.npz", allow_pickle=False) as f:
        old = {k: f[k] for k in f.files if k not in ("permuted", "rotation_degrees")}
    np.savez(tmp_path / "old.npz", **old)
    loaded = Partition.load(tmp_path / "old.npz")
    assert loaded == partition
    assert [k for k, c in enumerate(loaded.clients) if c.malicious] == [
        k for k, c in enumerate(partition.clients) if c.label_permutation is not None
    ]


def test_client_files_carry_the_rotated_inputs_and_mapped_labels(tmp_path: Path) -> None:
    images = _image_pool()
    for scheme in ("feature_groups", "concept_groups"):
        partition = make_partition(images, num_clients=4, scheme=scheme, seed=0)
        client = client_datasets(images, partition)[2]
        save_client_file(client, tmp_path / "c.npz", num_classes=10, dataset="images")
        loaded, meta = load_client_file(tmp_path / "c.npz")
        assert meta["malicious"] is False
        for split in ("train", "val", "test"):
            np.testing.assert_array_equal(getattr(loaded, split).x, getattr(client, split).x)
            np.testing.assert_array_equal(getattr(loaded, split).y, getattr(client, split).y)


@pytest.mark.parametrize("scheme", GROUP_SCHEMES)
def test_fewer_than_four_clients_is_refused(pool: DataPool, scheme: str) -> None:
    with pytest.raises(ValueError, match=r"needs num_clients >= 4 \(one per group\), got 3"):
        make_partition(pool, num_clients=3, scheme=scheme, seed=0)


@pytest.mark.parametrize("ratio", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_size_ratio_is_refused(pool: DataPool, ratio: float) -> None:
    with pytest.raises(ValueError, match="size_ratio must be a finite number > 0"):
        make_partition(pool, num_clients=8, scheme="feature_groups", seed=0, size_ratio=ratio)


def test_a_pool_too_small_names_needed_and_available(pool: DataPool) -> None:
    tiny = _image_pool(n_train=40, n_test=20)
    with pytest.raises(ValueError, match="needs 88 training samples but only 40 are available"):
        make_partition(tiny, num_clients=8, scheme="concept_groups", seed=0, size_ratio=10.0)
    held = pool.train.y < 5  # without classes 5..9, group 1 and the small groups lack data
    no_small = DataPool(
        "cut", pool.train.subset(np.flatnonzero(held)), pool.test, 10, pool.input_shape
    )
    with pytest.raises(ValueError, match=r"samples of class \d but only 0 are available"):
        make_partition(no_small, num_clients=20, scheme="label_groups", seed=0)


def test_label_and_concept_shift_need_four_classes() -> None:
    rng = np.random.default_rng(0)
    data = ArrayDataset(rng.normal(size=(100, 1, 4)).astype(np.float32), rng.integers(0, 3, 100))
    three = DataPool("three", data, data, 3, (1, 4))
    for scheme in ("label_groups", "concept_groups"):
        with pytest.raises(ValueError, match="at least 4 classes"):
            make_partition(three, num_clients=4, scheme=scheme, seed=0)


@pytest.mark.parametrize("value", ["0", "-2", "5000"])
def test_config_rejects_a_bad_size_ratio(value: str) -> None:
    with pytest.raises(ConfigError, match=r"data\.size_ratio:"):
        load_config(None, [f"data.size_ratio={value}"])


def test_config_accepts_the_group_partitions() -> None:
    for scheme in GROUP_SCHEMES:
        config = load_config(None, [f"data.partition={scheme}", "data.size_ratio=2.5"])
        assert config.data.partition == scheme and config.data.size_ratio == 2.5
