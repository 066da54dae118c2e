"""Partition schemes: which training-pool samples each client gets.

Each function returns one index array per client into the training pool; the arrays are
disjoint. ``make_partition`` then carves each client's validation split out of its array
and draws its test split, so the schemes only decide *who holds what*.

The group schemes follow FedCollab's experiments (section 5.1): four consecutive blocks of
clients, blocks 0 and 1 "large" and 2 and 3 "small", whose distributions sit at several
distances from each other so that the best coalitions are known in advance.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

MAX_DIRICHLET_ATTEMPTS = 10_000
"""Draws of class proportions before Dirichlet gives up on giving every client enough data.

Generous because acceptance can be rare: with 100 clients, 10 classes, 16,000 samples and
alpha = 0.1 only about 1 draw in 300 gives every client 10 samples (each try costs ~0.1 ms).
"""
PATHOLOGICAL_ALPHA = 0.5
"""Concentration of the split of one class among the clients that hold it."""
NUM_GROUPS = 4
LARGE_GROUPS = (0, 1)
GROUP_ROTATIONS = (25.0, -25.0, 155.0, -155.0)
"""Feature shift: degrees each group's inputs are turned by (FedCollab's angles)."""
CONCEPT_AGREEMENT = 0.7
"""Concept shift: share of classes group 1 labels like group 0 (the paper's 14 of 20)."""


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


def client_groups(num_clients: int) -> list[int]:
    """Each client's group: four near-equal consecutive blocks (sizes differ by at most 1)."""
    blocks = np.array_split(np.arange(num_clients), NUM_GROUPS)
    return [g for g, block in enumerate(blocks) for _ in block]


def label_group_classes(num_classes: int) -> list[list[int]]:
    """The classes each group draws from, uniformly (label shift; ``num_classes >= 4``).

    With ``w = num_classes // 2`` and ``d = ceil(w / 2)``: group 0 holds classes ``[0, w)``,
    group 1 ``[d, d + w)`` (so ``w - d`` classes in common with group 0) and groups 2 and 3
    both the rest, ``[d + w, num_classes)``, which no large group holds. Hence three levels:
    the same group (same mix), the other large group (total variation ``d / w``, 1/2 to 2/3)
    and small against large (disjoint, total variation 1); the two small groups are alike.
    """
    w = num_classes // 2
    d = -(-w // 2)
    rest = list(range(d + w, num_classes))
    return [list(range(w)), list(range(d, d + w)), rest, rest]


def concept_permutations(num_classes: int) -> list[np.ndarray]:
    """Each group's label map: a client of group g reads label y as ``perms[g][y]``.

    Group 0 keeps the labels. Group 1 keeps the first ``a = min(round(0.7 n), n - 2)``
    classes and shifts the other ``n - a`` by one place in a cycle (``c -> c + 1``, the last
    back to ``a``), so it agrees with group 0 on a share ``a / n`` of the classes. Groups 2
    and 3 share ``c -> (c + n // 2) mod n``, which agrees with neither group 0 nor group 1 on
    any class (``num_classes >= 4``).
    """
    n = num_classes
    agree = min(round(CONCEPT_AGREEMENT * n), n - 2)
    cycled = np.concatenate([np.arange(agree), np.roll(np.arange(agree, n), -1)])
    swapped = (np.arange(n) + n // 2) % n
    return [np.arange(n), cycled, swapped, swapped.copy()]


def label_groups(
    labels: np.ndarray,
    num_classes: int,
    groups: list[int],
    size_ratio: float,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], int]:
    """Label shift: each client draws uniformly from its group's classes (see
    ``label_group_classes``), large clients ``size_ratio`` times as much as small ones.

    Returns the index arrays and the small-client size: the largest for which every class
    has enough samples. A client's remainder over its classes goes to a different class per
    client, so class totals stay balanced.
    """
    classes = label_group_classes(num_classes)
    available = np.bincount(labels, minlength=num_classes)

    def demand(small: int) -> np.ndarray:
        counts = np.zeros((len(groups), num_classes), dtype=np.int64)
        for k, size in enumerate(_client_sizes(groups, small, size_ratio)):
            held = classes[groups[k]]
            base, rest = divmod(int(size), len(held))
            counts[k, held] = base
            counts[k, np.asarray(held)[(k + np.arange(rest)) % len(held)]] += 1
        return counts

    names = [f"samples of class {c}" for c in range(num_classes)]
    counts, small = _largest_fit("label_groups", demand, available, names)
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    return _deal(by_class, counts.T), small


def shared_groups(
    num_samples: int, groups: list[int], size_ratio: float, rng: np.random.Generator, scheme: str
) -> tuple[list[np.ndarray], int]:
    """Feature and concept shift: samples drawn uniformly from the whole pool (the pool's
    label mix), large clients ``size_ratio`` times as many as small ones.

    Returns the index arrays and the small-client size: the largest the pool can supply.
    """

    def demand(small: int) -> np.ndarray:
        return _client_sizes(groups, small, size_ratio)[:, None]

    counts, small = _largest_fit(scheme, demand, np.asarray([num_samples]), ["training samples"])
    order = rng.permutation(num_samples)
    return np.split(order, np.cumsum(counts[:, 0]))[:-1], small


def large_size(small: int, size_ratio: float) -> int:
    """A large client's sample count: ``size_ratio * small`` rounded half up, at least 2
    (a train and a validation sample)."""
    return max(2, math.floor(size_ratio * small + 0.5))


def _client_sizes(groups: list[int], small: int, size_ratio: float) -> np.ndarray:
    large = large_size(small, size_ratio)
    return np.asarray([large if g in LARGE_GROUPS else small for g in groups], dtype=np.int64)


def _largest_fit(
    scheme: str,
    demand: Callable[[int], np.ndarray],
    available: np.ndarray,
    names: list[str],
) -> tuple[np.ndarray, int]:
    """``demand(small)`` (clients x bins) for the largest small-client size that fits.

    Bisection: the demand grows with ``small``. Two samples per small client is the least
    that gives each a train and a validation sample; if even that does not fit, the error
    names the first bin that runs short, with what it needs and what the pool has.
    """
    needed = demand(2).sum(axis=0)
    short = np.flatnonzero(needed > available)
    if len(short):
        b = int(short[0])
        raise ValueError(
            f"{scheme}: the training pool is too small: even 2 samples per small client needs "
            f"{int(needed[b])} {names[b]} but only {int(available[b])} are available; use "
            "fewer clients, a smaller size_ratio or a larger pool"
        )
    # demand(lo) fits; demand(hi) cannot, as one small client alone would exceed the pool.
    lo, hi = 2, int(available.sum()) + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if np.all(demand(mid).sum(axis=0) <= available):
            lo = mid
        else:
            hi = mid
    return demand(lo), lo


def _deal(by_class: list[np.ndarray], counts: np.ndarray) -> list[np.ndarray]:
    """Client k gets ``counts[c, k]`` samples of class c, taken in turn from ``by_class[c]``.

    Samples beyond ``counts[c].sum()`` are left out.
    """
    shares: list[list[np.ndarray]] = [[] for _ in range(counts.shape[1])]
    for idx, row in zip(by_class, counts, strict=True):
        for k, chunk in enumerate(np.split(idx, np.cumsum(row))[:-1]):
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
