"""Collaboration equilibrium: stable coalitions from the benefit graph (Cui et al., Algorithm 1).

U(i, S) is client i's utility when it trains with the set S (i ∈ S). Inside a coalition C a
client trains with its best subset, so it obtains U_max(i, C) = max over S ⊆ C with i ∈ S of
U(i, S). Its optimal collaborator set OCS_C(i) is a smallest S attaining U_max(i, C). The
benefit graph BG(C) has an edge j → i when j ∈ OCS_C(i), j ≠ i.

The algorithm: on the remaining clients, estimate every OCS, build BG, take its strongly
connected components; a component with no edge coming in from outside holds every member's OCS,
so its members already reach their best utility among the remaining clients: it is stable and
leaves. The condensation of BG is a DAG, so at least one component leaves per iteration. (The
paper tests stability as "every member reaches U_max(i, remaining)", its Eq. 4; with an exact
OCS that is the same as no incoming edge, and the graph test also works for estimated OCS.)

What the output guarantees (checked by brute force in the tests), with an exact OCS:
- outer agreement (Axiom 2) always: the first member of any other group to leave got, at that
  point, the best utility available among clients that still included the whole group;
- inner agreement (Axiom 1) when each client's best subset is unique (the paper speaks of "the"
  OCS). Any proper sub-group C' of a strongly connected coalition receives an edge j → i from
  outside it (i ∈ C', j ∉ C'); j is in i's unique best subset, so i does worse in C'. With
  ties (i does equally well with {i, j} or {i, k}) a sub-group can leave without loss: a limit
  of the paper's argument, shown in the tests, not a bug here.

The OCS estimators: exact by enumerating subsets (small sets, tests), the ratio rule that ends
the paper's SPO search over a learned Pareto front (the hypernetwork is not part of this
module), and DPFL's greedy search as a cheaper plug-in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import combinations

import networkx as nx
import numpy as np

from collabfl.strategies.greedy import ggc

Utility = Callable[[int, frozenset[int]], float]
"""U(i, S): client i's utility when training with the set S, which contains i."""
OcsMap = Mapping[int, AbstractSet[int]]
"""Each client's optimal collaborator set (it includes the client itself)."""
OcsEstimator = Callable[[frozenset[int]], OcsMap]
"""Given the remaining clients, every one's OCS within them."""

MAX_EXACT_CLIENTS = 16
"""Exact OCS enumerates 2^(n−1) subsets per client; beyond this, use an estimator."""


def benefit_graph(ocs: OcsMap) -> nx.DiGraph:
    """BG: one node per client of ``ocs``, an edge j → i when j ∈ OCS(i) and j ≠ i."""
    graph = nx.DiGraph()
    graph.add_nodes_from(sorted(ocs))
    for i, collaborators in ocs.items():
        for j in collaborators:
            if j not in ocs:
                raise ValueError(f"OCS of client {i} names client {j}, who is not in the set")
            if j != i:
                graph.add_edge(j, i)
    return graph


def stable_components(graph: nx.DiGraph) -> list[frozenset[int]]:
    """Strongly connected components with no edge coming in from outside them."""
    condensed = nx.condensation(graph)
    return [
        frozenset(condensed.nodes[node]["members"])
        for node in condensed.nodes
        if condensed.in_degree(node) == 0
    ]


def _sorted_partition(coalitions: Iterable[frozenset[int]]) -> list[frozenset[int]]:
    return sorted(coalitions, key=sorted)


def collaboration_equilibrium(
    clients: Iterable[int], ocs_estimator: OcsEstimator
) -> list[frozenset[int]]:
    """The paper's Algorithm 1: peel off stable coalitions, re-estimating the OCS each time.

    ``ocs_estimator(remaining)`` must return an OCS for every remaining client, drawn from the
    remaining clients. Returns the coalitions sorted by their members.
    """
    remaining = frozenset(clients)
    partition: list[frozenset[int]] = []
    while remaining:
        ocs = ocs_estimator(remaining)
        if set(ocs) != remaining:
            raise ValueError(
                f"the OCS estimator answered for {sorted(ocs)}, expected {sorted(remaining)}"
            )
        stable = stable_components(benefit_graph(ocs))
        if not stable:  # impossible: a finite DAG always has a source
            raise RuntimeError("no stable coalition found; the condensation must have a source")
        partition.extend(stable)
        remaining = remaining.difference(*stable)
    return _sorted_partition(partition)


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


def ocs_from_ratio_rule(
    weights: Mapping[int, float], i: int, threshold: float = 0.7
) -> frozenset[int]:
    """SPO's last step: the clients whose weight in i's optimal direction d* is ≥ threshold · d_i.

    ``weights`` is d* over the remaining clients (client id → weight). An ideal d* is sparse;
    a learned one is not, so the official code keeps j when d_j / d_i ≥ 0.7. Client i itself
    is always kept.
    """
    if i not in weights:
        raise ValueError(f"client {i} has no weight in {sorted(weights)}")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    own = float(weights[i])
    if not np.isfinite(own) or own <= 0:
        raise ValueError(f"client {i}'s own weight must be positive, got {own}")
    for j, w in weights.items():
        if not np.isfinite(w) or w < 0:
            raise ValueError(f"weights must be finite and >= 0, client {j} has {w}")
    return frozenset(j for j, w in weights.items() if w / own >= threshold)


def ratio_rule_estimator(
    direction: Callable[[int, frozenset[int]], Mapping[int, float]], threshold: float = 0.7
) -> OcsEstimator:
    """OCS estimator from a search for d*: ``direction(i, remaining)`` gives i's d* over them."""

    def estimate(clients: frozenset[int]) -> dict[int, frozenset[int]]:
        return {
            i: ocs_from_ratio_rule(direction(i, clients), i, threshold) for i in sorted(clients)
        }

    return estimate


def ocs_greedy(
    i: int,
    clients: AbstractSet[int],
    set_reward: Callable[[frozenset[int]], float],
    rng: np.random.Generator,
) -> frozenset[int]:
    """{i} ∪ GGC(i, C ∖ {i}) with no budget: DPFL's greedy search as a cheap OCS estimate.

    ``set_reward(S)`` scores a set containing i (higher is better), e.g. minus i's validation
    loss of the average of S. Candidates are visited in a seeded order over the sorted ids.
    Unlike the exact OCS it need not be smallest: an indifferent peer is kept (GGC adds when
    both gains are zero).
    """
    if i not in clients:
        raise ValueError(f"client {i} is not in {sorted(clients)}")
    others: Sequence[int] = sorted(set(clients) - {i})
    return frozenset((i, *ggc(i, others, set_reward, None, rng)))


def greedy_estimator(reward: Utility, rng: np.random.Generator) -> OcsEstimator:
    """OCS estimator running ``ocs_greedy`` for each remaining client (in id order)."""

    def estimate(clients: frozenset[int]) -> dict[int, frozenset[int]]:
        return {
            i: ocs_greedy(i, clients, functools.partial(reward, i), rng) for i in sorted(clients)
        }

    return estimate


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


MAX_CHECK_CLIENTS = 10
"""The outer check visits every subset and every subset of it: about 3^n utility lookups."""


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
