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

The OCS estimators here: the ratio rule that ends the paper's SPO search over a learned Pareto
front (the hypernetwork is not part of this module) and DPFL's greedy search as a cheaper
plug-in. The exact estimator (enumerating subsets) and the axiom checks are the tests'
brute-force references (tests/support/equilibrium_reference.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import networkx as nx
import numpy as np

from collabfl.strategies.greedy import ggc

Utility = Callable[[int, frozenset[int]], float]
"""U(i, S): client i's utility when training with the set S, which contains i."""
OcsMap = Mapping[int, AbstractSet[int]]
"""Each client's optimal collaborator set (it includes the client itself)."""
OcsEstimator = Callable[[frozenset[int]], OcsMap]
"""Given the remaining clients, every one's OCS within them."""


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
