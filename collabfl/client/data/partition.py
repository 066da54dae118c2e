"""``make_partition``: from a pool and a scheme to every client's train/val/test indices.

Randomness comes from one ``SeedSequence(seed)`` split into independent streams (who holds
what, each client's val/test draw, who is malicious), so a partition is a pure function of
its arguments and changing, say, the flip fraction does not reshuffle the clients' data.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import schemes
from .arrays import DataPool
from .splits import ClientSplit, Partition

GROUP_SCHEMES = ("label_groups", "feature_groups", "concept_groups")
SCHEMES = ("iid", "dirichlet", "pathological", "natural", *GROUP_SCHEMES)


def make_partition(
    pool: DataPool,
    *,
    num_clients: int,
    scheme: str,
    seed: int,
    alpha: float = 0.1,
    classes_per_client: int = 3,
    val_fraction: float = 0.2,
    test_ratio: float = 1.0,
    label_flip_fraction: float = 0.0,
    size_ratio: float = 4.0,
) -> Partition:
    """Split ``pool`` among ``num_clients`` clients; the same arguments give the same result.

    Each client's samples are shuffled and ``val_fraction`` of them (at least one) become its
    validation split. Its test split is drawn from ``pool.test`` with the label mix of its
    train split: ``round(test_ratio * (train + val))`` samples apportioned over its classes,
    at least one per class and at most what the test pool has of that class, so the total can
    differ slightly from the target. Under ``natural`` the test split is instead the writer's
    own test samples and ``test_ratio`` is unused. ``round(label_flip_fraction *
    num_clients)`` clients get one shared label derangement (they are the malicious ones);
    on a concept-shift client it is applied after the client's own label map.

    The group schemes (``label_groups``, ``feature_groups``, ``concept_groups``; see
    ``schemes``) split the clients into four consecutive blocks, ``meta["groups"]``; clients
    of blocks 0 and 1 hold ``size_ratio`` times the samples of clients of blocks 2 and 3
    (train + validation counts in ``meta["samples_per_client"]``).
    """
    _validate(
        pool,
        num_clients,
        scheme,
        seed,
        alpha,
        classes_per_client,
        val_fraction,
        test_ratio,
        label_flip_fraction,
        size_ratio,
    )
    assign_seq, split_seq, flip_seq = np.random.SeedSequence(seed).spawn(3)
    assign_rng = np.random.default_rng(assign_seq)
    labels = pool.train.y
    params: dict[str, Any] = {}
    own_tests: list[np.ndarray] | None = None
    perms: list[np.ndarray | None] = [None] * num_clients
    rotations: list[float | None] = [None] * num_clients
    if scheme in GROUP_SCHEMES:
        groups = schemes.client_groups(num_clients)
        if scheme == "label_groups":
            local, small = schemes.label_groups(
                labels, pool.num_classes, groups, size_ratio, assign_rng
            )
            params["group_classes"] = schemes.label_group_classes(pool.num_classes)
        else:
            local, small = schemes.shared_groups(
                len(labels), groups, size_ratio, assign_rng, scheme
            )
        if scheme == "feature_groups":
            rotations = [schemes.GROUP_ROTATIONS[g] for g in groups]
            params["group_rotation_degrees"] = list(schemes.GROUP_ROTATIONS)
        if scheme == "concept_groups":
            maps = schemes.concept_permutations(pool.num_classes)
            perms = [maps[g].copy() for g in groups]
            params["group_label_permutations"] = [m.tolist() for m in maps]
        params["groups"] = groups
        params["size_ratio"] = float(size_ratio)
        params["samples_per_client"] = {
            "large": schemes.large_size(small, size_ratio),
            "small": small,
        }
    elif scheme == "natural":
        if pool.train_groups is None or pool.test_groups is None:
            raise ValueError(f"scheme 'natural' needs writer groups, which {pool.name!r} lacks")
        writers = schemes.natural(pool.train_groups, pool.test_groups, num_clients, assign_rng)
        local = [pool.train_groups[w] for w in writers]
        own_tests = [pool.test_groups[w] for w in writers]
        params["writers"] = writers
    elif scheme == "iid":
        local = schemes.iid(len(labels), num_clients, assign_rng)
    elif scheme == "dirichlet":
        local = schemes.dirichlet(labels, pool.num_classes, num_clients, alpha, assign_rng)
        params["alpha"] = float(alpha)
    else:
        local = schemes.pathological(
            labels, pool.num_classes, num_clients, classes_per_client, assign_rng
        )
        params["classes_per_client"] = int(classes_per_client)

    test_by_class = [np.flatnonzero(pool.test.y == c) for c in range(pool.num_classes)]
    clients = []
    for k, child in enumerate(split_seq.spawn(num_clients)):
        rng = np.random.default_rng(child)
        train, val = _train_val(local[k], val_fraction, rng)
        if own_tests is not None:
            test = np.sort(own_tests[k]).astype(np.int64)
        else:
            total = round(test_ratio * (len(train) + len(val)))
            test = _draw_test(labels[train], total, test_by_class, rng)
        clients.append(ClientSplit(train, val, test, perms[k], rotation_degrees=rotations[k]))

    malicious: list[int] = []
    if label_flip_fraction > 0:
        flip_rng = np.random.default_rng(flip_seq)
        count = round(label_flip_fraction * num_clients)
        malicious = sorted(int(k) for k in flip_rng.choice(num_clients, count, replace=False))
        flip = _derangement(pool.num_classes, flip_rng)
        for k in malicious:
            c = clients[k]
            own = c.label_permutation
            mapped = flip.copy() if own is None else flip[own]
            clients[k] = dataclasses.replace(c, label_permutation=mapped, malicious=True)

    # Plain Python numbers only: meta is saved as JSON, which numpy scalars would break.
    meta = {
        "scheme": scheme,
        "num_clients": int(num_clients),
        "seed": int(seed),
        **params,
        "val_fraction": float(val_fraction),
        "test_ratio": None if scheme == "natural" else float(test_ratio),
        "label_flip_fraction": float(label_flip_fraction),
        "malicious_clients": malicious,
        "pool": {
            "name": pool.name,
            "num_train": len(pool.train),
            "num_test": len(pool.test),
            "num_classes": pool.num_classes,
        },
    }
    return Partition(clients=clients, meta=meta)


def true_groups(meta: Mapping[str, Any]) -> list[str] | None:
    """Each client's true group, named, from a partition's ``meta``; None when the
    partition has none (no group scheme, no label flipping).

    The group schemes' blocks are "group 0" to "group 3"; label-flipped clients form a group
    of their own ("label-flipped", or "group g, label-flipped" inside a block), since they
    share one concept no benign client holds. Figures use it to show whether a method's
    graph or coalitions found the groups the partition built.
    """
    groups = meta.get("groups")
    flipped = set(meta.get("malicious_clients") or ())
    if groups is None and not flipped:
        return None
    clients = range(int(meta["num_clients"]))
    names = [f"group {groups[k]}" if groups is not None else "benign" for k in clients]
    for k in flipped:
        names[k] = "label-flipped" if groups is None else f"{names[k]}, label-flipped"
    return names


def _validate(
    pool: DataPool,
    num_clients: int,
    scheme: str,
    seed: int,
    alpha: float,
    classes_per_client: int,
    val_fraction: float,
    test_ratio: float,
    label_flip_fraction: float,
    size_ratio: float,
) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    # Every client needs at least one train and one validation sample.
    most = len(pool.train) // 2
    if not isinstance(num_clients, int | np.integer) or not 1 <= num_clients <= most:
        raise ValueError(
            f"num_clients must be an integer in [1, {most}] (half the training pool), "
            f"got {num_clients!r}"
        )
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    if not isinstance(classes_per_client, int | np.integer) or not (
        1 <= classes_per_client <= pool.num_classes
    ):
        raise ValueError(
            f"classes_per_client must be an integer in [1, {pool.num_classes}], "
            f"got {classes_per_client!r}"
        )
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    if not test_ratio > 0:
        raise ValueError(f"test_ratio must be > 0, got {test_ratio!r}")
    if not 0 <= label_flip_fraction <= 1:
        raise ValueError(f"label_flip_fraction must be in [0, 1], got {label_flip_fraction!r}")
    if label_flip_fraction > 0 and pool.num_classes < 2:
        raise ValueError("label_flip_fraction > 0 needs a pool with at least 2 classes")
    if not (size_ratio > 0 and math.isfinite(size_ratio)):
        raise ValueError(f"size_ratio must be a finite number > 0, got {size_ratio!r}")
    if scheme in GROUP_SCHEMES and num_clients < schemes.NUM_GROUPS:
        raise ValueError(
            f"scheme {scheme!r} needs num_clients >= {schemes.NUM_GROUPS} (one per group), "
            f"got {num_clients}"
        )
    if scheme in ("label_groups", "concept_groups") and pool.num_classes < 4:
        raise ValueError(f"scheme {scheme!r} needs a pool with at least 4 classes")


def _train_val(
    idx: np.ndarray, val_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A shuffled split into (train, val); both non-empty since ``len(idx) >= 2``."""
    shuffled = rng.permutation(np.asarray(idx, dtype=np.int64))
    n_val = min(max(1, round(val_fraction * len(shuffled))), len(shuffled) - 1)
    return np.sort(shuffled[n_val:]), np.sort(shuffled[:n_val])


def _draw_test(
    train_labels: np.ndarray,
    total: int,
    test_by_class: list[np.ndarray],
    rng: np.random.Generator,
) -> np.ndarray:
    """Test indices whose class counts follow ``train_labels``' mix (no repeats)."""
    classes, counts = np.unique(train_labels, return_counts=True)
    picks = [np.zeros(0, dtype=np.int64)]
    for c, want in zip(classes, _apportion(total, counts), strict=True):
        available = test_by_class[c]
        picks.append(rng.choice(available, size=min(max(want, 1), len(available)), replace=False))
    return np.sort(np.concatenate(picks))


def _apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (largest remainders)."""
    quotas = total * weights / weights.sum()
    counts: np.ndarray = np.floor(quotas).astype(np.int64)
    leftover = total - int(counts.sum())
    counts[np.argsort(counts - quotas, kind="stable")[:leftover]] += 1
    return counts


def _derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` with no fixed point (n >= 2).

    Rejection sampling: about e permutations are drawn on average.
    """
    while True:
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm.astype(np.int64)
