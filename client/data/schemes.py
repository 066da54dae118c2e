"""Label-skew schemes: which training-pool samples each client gets.

Each function returns one index array per client into the training pool; the arrays are
disjoint. ``make_partition`` then carves each client's validation split out of its array
and draws its test split, so the schemes only decide *who holds what*.
"""

from __future__ import annotations

import numpy as np

MAX_DIRICHLET_ATTEMPTS = 10_000
"""Draws of class proportions before Dirichlet gives up on giving every client enough data.

Generous because acceptance can be rare: with 100 clients, 10 classes, 16,000 samples and
alpha = 0.1 only about 1 draw in 300 gives every client 10 samples (each try costs ~0.1 ms).
"""
PATHOLOGICAL_ALPHA = 0.5
"""Concentration of the split of one class among the clients that hold it."""


def iid(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """All samples, shuffled and dealt into near-equal shares (sizes differ by at most 1)."""
    return np.array_split(rng.permutation(num_samples), num_clients)


def dirichlet(
    labels: np.ndarray,
    num_classes: int,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """All samples; each class is split among clients by proportions ~ Dir(alpha * 1).

    Small ``alpha`` concentrates each class on a few clients. Draws are repeated until every
    client holds at least ``min(10, n // num_clients)`` samples, so each can have a
    non-empty train and validation split.
    """
    min_size = min(10, len(labels) // num_clients)
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    class_sizes = np.asarray([len(idx) for idx in by_class])
    for _ in range(MAX_DIRICHLET_ATTEMPTS):
        proportions = rng.dirichlet(np.full(num_clients, alpha), size=num_classes)
        # counts[c, k]: samples of class c for client k; decide on sizes before any copying.
        counts = np.diff(_cuts(proportions, class_sizes), axis=1)
        if counts.sum(axis=0).min() >= min_size:
            return _deal(by_class, counts)
    raise ValueError(
        f"dirichlet: no draw in {MAX_DIRICHLET_ATTEMPTS} attempts gave every one of "
        f"{num_clients} clients at least {min_size} samples; use a larger alpha (got {alpha}) "
        "or fewer clients"
    )


def pathological(
    labels: np.ndarray,
    num_classes: int,
    num_clients: int,
    classes_per_client: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Each client holds exactly ``classes_per_client`` classes.

    Classes are dealt round-robin over a seeded class order (client i takes the next k
    classes of the cycle), so every class has the same number of holders, give or take one.
    A class's samples are split among its holders by Dir(0.5) proportions on top of a floor
    that gives each holder at least one sample of it (two when k = 1, for a validation
    sample). Covers all samples when ``num_clients * k >= num_classes``; otherwise the
    classes nobody holds are left out.
    """
    k = classes_per_client
    order = rng.permutation(num_classes)
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(num_clients):
        for c in order[(client * k + np.arange(k)) % num_classes]:
            holders[c].append(client)
    floor = -(-2 // k)
    shares: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, owners in enumerate(holders):
        if not owners:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        spare = len(idx) - floor * len(owners)
        if spare < 0:
            raise ValueError(
                f"pathological: class {c} has {len(idx)} samples, too few for its "
                f"{len(owners)} holders; use fewer clients or fewer classes_per_client"
            )
        extra = np.diff(_cuts(rng.dirichlet(np.full(len(owners), PATHOLOGICAL_ALPHA)), spare))
        for client, chunk in zip(owners, np.split(idx, np.cumsum(floor + extra)[:-1]), strict=True):
            shares[client].append(chunk)
    return [np.concatenate(s) for s in shares]


def natural(
    train_groups: list[np.ndarray],
    test_groups: list[np.ndarray],
    num_clients: int,
    rng: np.random.Generator,
) -> list[int]:
    """Writers that become clients: the first ``num_clients`` of a seeded shuffle.

    Only writers with at least two training samples (a train and a validation sample) and
    one test sample are eligible.
    """
    eligible = [
        w
        for w, (tr, te) in enumerate(zip(train_groups, test_groups, strict=True))
        if len(tr) >= 2 and len(te) >= 1
    ]
    if num_clients > len(eligible):
        raise ValueError(
            f"num_clients must be in [1, {len(eligible)}] for the natural scheme (writers with "
            f"at least 2 train and 1 test samples), got {num_clients}"
        )
    return [int(w) for w in rng.permutation(eligible)[:num_clients]]


def _deal(by_class: list[np.ndarray], counts: np.ndarray) -> list[np.ndarray]:
    """Client k gets ``counts[c, k]`` samples of class c, taken in turn from ``by_class[c]``."""
    shares: list[list[np.ndarray]] = [[] for _ in range(counts.shape[1])]
    for idx, row in zip(by_class, counts, strict=True):
        for k, chunk in enumerate(np.split(idx, np.cumsum(row)[:-1])):
            shares[k].append(chunk)
    return [np.concatenate(s) for s in shares]


def _cuts(proportions: np.ndarray, total: int | np.ndarray) -> np.ndarray:
    """Boundaries 0 = b_0 <= ... <= b_m = total splitting ``total`` items by ``proportions``.

    Works row-wise on a 2-D ``proportions`` with one ``total`` per row.
    """
    total = np.asarray(total)[..., None]
    inner = np.minimum((np.cumsum(proportions, axis=-1)[..., :-1] * total).astype(np.int64), total)
    zeros = np.zeros_like(inner[..., :1])
    return np.concatenate([zeros, inner, zeros + total], axis=-1)
