"""Collaboration equilibrium by its definitions, brute force: exact OCS and the two axioms.

References the fast code is checked against, never run by the product: the federated method
estimates each OCS with SPO or DPFL's greedy search (strategies/equilibrium.py), while here
every subset is enumerated, so only small client sets are allowed. ``ocs_from_utility`` is the
exact OCS estimator (the paper's "true benefit graph"); ``inner_violation`` and
``outer_violation`` test a partition against Axioms 1 and 2 (Cui et al. 2022, Eqs. 2-3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import combinations

from collabfl.strategies.equilibrium import OcsEstimator, Utility

MAX_EXACT_CLIENTS = 16
"""Exact OCS enumerates 2^(n−1) subsets per client; beyond this, use an estimator."""


def _subsets_with(i: int, clients: AbstractSet[int]) -> Iterable[frozenset[int]]:
    """Subsets of ``clients`` that contain i: by size, then lexicographically."""
    others = sorted(set(clients) - {i})
    for size in range(len(others) + 1):
        for extra in combinations(others, size):
            yield frozenset((i, *extra))


def _check_exact_size(clients: AbstractSet[int], limit: int) -> None:
    if len(clients) > limit:
        raise ValueError(f"exact enumeration over {len(clients)} clients (limit {limit})")


def max_utility(utility: Utility, i: int, clients: AbstractSet[int]) -> float:
    """U_max(i, C): the best utility client i gets from any subset of C containing it."""
    if i not in clients:
        raise ValueError(f"client {i} is not in {sorted(clients)}")
    _check_exact_size(clients, MAX_EXACT_CLIENTS)
    return max(utility(i, subset) for subset in _subsets_with(i, clients))


def optimal_collaborator_set(
    utility: Utility, i: int, clients: AbstractSet[int], tolerance: float = 0.0
) -> frozenset[int]:
    """OCS_C(i) by enumeration: the smallest subset attaining U_max(i, C).

    A subset attains the maximum when its utility is within ``tolerance`` of it. Among several,
    the smallest wins, then the lexicographically first sorted member list, so the answer is
    deterministic; the smallest one also satisfies the paper's minimality (1b) since every
    proper subset is smaller and so falls short.
    """
    if i not in clients:
        raise ValueError(f"client {i} is not in {sorted(clients)}")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    _check_exact_size(clients, MAX_EXACT_CLIENTS)
    candidates = list(_subsets_with(i, clients))
    values = [utility(i, subset) for subset in candidates]
    best = max(values)
    return next(s for s, v in zip(candidates, values, strict=True) if v >= best - tolerance)


def cached_utility(utility: Utility) -> Utility:
    """Memoise U: the equilibrium asks for the same (i, S) again on every iteration."""
    cache: dict[tuple[int, frozenset[int]], float] = {}

    def cached(i: int, subset: frozenset[int]) -> float:
        key = (i, subset)
        if key not in cache:
            cache[key] = float(utility(i, subset))
        return cache[key]

    return cached


def table_utility(table: Mapping[tuple[int, frozenset[int]], float]) -> Utility:
    """U from a table keyed by (client, set containing the client)."""

    def lookup(i: int, subset: frozenset[int]) -> float:
        try:
            return table[(i, subset)]
        except KeyError:
            raise KeyError(
                f"utility table has no entry for client {i} with {sorted(subset)}"
            ) from None

    return lookup


def ocs_from_utility(utility: Utility, tolerance: float = 0.0) -> OcsEstimator:
    """The exact OCS estimator (enumeration, memoised utility); see optimal_collaborator_set."""
    memo = cached_utility(utility)

    def estimate(clients: frozenset[int]) -> dict[int, frozenset[int]]:
        return {i: optimal_collaborator_set(memo, i, clients, tolerance) for i in sorted(clients)}

    return estimate


MAX_CHECK_CLIENTS = 10
"""The outer check visits every subset and every subset of it: about 3^n utility lookups."""


def _check_partition(partition: Sequence[AbstractSet[int]], limit: int) -> frozenset[int]:
    seen: set[int] = set()
    for coalition in partition:
        if not coalition:
            raise ValueError("a coalition is empty")
        if seen & set(coalition):
            raise ValueError(f"coalitions overlap on {sorted(seen & set(coalition))}")
        seen |= set(coalition)
    if len(seen) > limit:
        raise ValueError(f"brute-force check over {len(seen)} clients (limit {limit})")
    return frozenset(seen)


def _nonempty_subsets(clients: AbstractSet[int]) -> Iterable[frozenset[int]]:
    members = sorted(clients)
    for size in range(1, len(members) + 1):
        for subset in combinations(members, size):
            yield frozenset(subset)


def inner_violation(
    partition: Sequence[AbstractSet[int]], utility: Utility, tolerance: float = 0.0
) -> tuple[frozenset[int], frozenset[int]] | None:
    """A (coalition, sub-group) breaking inner agreement (Axiom 1, Eq. 2), or None.

    Inner agreement: for every coalition C and every non-empty proper subset C' ⊊ C, some
    i ∈ C' has U_max(i, C') < U_max(i, C), i.e. someone in C' loses by splitting off. A
    violation is a C' in which nobody loses (within ``tolerance``).
    """
    _check_partition(partition, MAX_CHECK_CLIENTS)
    memo = cached_utility(utility)
    for coalition in partition:
        whole = frozenset(coalition)
        inside = {i: max_utility(memo, i, whole) for i in whole}
        for part in _nonempty_subsets(whole):
            if part == whole:
                continue
            if all(max_utility(memo, i, part) >= inside[i] - tolerance for i in part):
                return whole, part
    return None


def outer_violation(
    partition: Sequence[AbstractSet[int]], utility: Utility, tolerance: float = 0.0
) -> frozenset[int] | None:
    """A group breaking outer agreement (Axiom 2, Eq. 3), or None.

    Outer agreement: for every non-empty group C' of clients not in the partition, some
    i ∈ C' has U_max(i, C') ≤ U_max(i, C_i), C_i being i's coalition. A violation is a group
    in which every member is strictly better off (by more than ``tolerance``). Groups in the
    partition cannot violate it, so every subset is checked.
    """
    clients = _check_partition(partition, MAX_CHECK_CLIENTS)
    memo = cached_utility(utility)
    home = {i: max_utility(memo, i, frozenset(c)) for c in partition for i in c}
    for group in _nonempty_subsets(clients):
        if all(max_utility(memo, i, group) > home[i] + tolerance for i in group):
            return group
    return None


def is_inner_stable(
    partition: Sequence[AbstractSet[int]], utility: Utility, tolerance: float = 0.0
) -> bool:
    """Inner agreement by brute force (≤ MAX_CHECK_CLIENTS clients); see inner_violation."""
    return inner_violation(partition, utility, tolerance) is None


def is_outer_stable(
    partition: Sequence[AbstractSet[int]], utility: Utility, tolerance: float = 0.0
) -> bool:
    """Outer agreement by brute force (≤ MAX_CHECK_CLIENTS clients); see outer_violation."""
    return outer_violation(partition, utility, tolerance) is None
