"""Collaboration equilibrium: the SCC algorithm, OCS estimators and brute-force stability checks."""

from __future__ import annotations

from itertools import combinations

import networkx as nx
import numpy as np
import pytest

from collabfl.strategies.equilibrium import (
    benefit_graph,
    collaboration_equilibrium,
    greedy_estimator,
    ocs_from_ratio_rule,
    ocs_greedy,
    ratio_rule_estimator,
    stable_components,
)
from tests.support.equilibrium_reference import (
    inner_violation,
    is_inner_stable,
    is_outer_stable,
    max_utility,
    ocs_from_utility,
    optimal_collaborator_set,
    outer_violation,
    table_utility,
)


def _subsets_with(i, clients):
    others = sorted(set(clients) - {i})
    for size in range(len(others) + 1):
        for extra in combinations(others, size):
            yield frozenset((i, *extra))


def needs_utility(needs: dict[int, set[int]], cost: float = 0.01):
    """Client i gains 1 once every client it needs is present; each member costs a little, so
    the smallest sufficient set is the unique best one: OCS(i) = {i} ∪ needs[i]."""

    def utility(i: int, subset: frozenset[int]) -> float:
        return (1.0 if needs[i] <= subset else 0.0) - cost * len(subset)

    return utility


def _as_sets(partition):
    return [set(c) for c in partition]


@pytest.mark.parametrize(
    "needs_of_4",
    [{1}, {2, 5}],  # ALGORITHMS.md's "4 needs 1"; the paper's figure: 4 would need 2 and 5
)
def test_worked_example_ring_dependent_and_pair(needs_of_4):
    needs = {1: {2}, 2: {3}, 3: {1}, 4: needs_of_4, 5: {6}, 6: {5}}
    utility = needs_utility(needs)
    partition = collaboration_equilibrium(range(1, 7), ocs_from_utility(utility))
    assert _as_sets(partition) == [{1, 2, 3}, {4}, {5, 6}]
    assert is_inner_stable(partition, utility)
    assert is_outer_stable(partition, utility)


def test_worked_example_benefit_graph_and_stable_components():
    needs = {1: {2}, 2: {3}, 3: {1}, 4: {1}, 5: {6}, 6: {5}}
    ocs = ocs_from_utility(needs_utility(needs))(frozenset(range(1, 7)))
    assert ocs == {i: frozenset({i, *needs[i]}) for i in needs}
    graph = benefit_graph(ocs)
    assert set(graph.edges) == {(2, 1), (3, 2), (1, 3), (1, 4), (6, 5), (5, 6)}
    assert sorted(map(sorted, stable_components(graph))) == [[1, 2, 3], [5, 6]]


def test_checkers_reject_the_papers_counter_examples():
    needs = {1: {2}, 2: {3}, 3: {1}, 4: {1}, 5: {6}, 6: {5}}
    utility = needs_utility(needs)
    # {1,2,3} can leave {1,2,3,4} without loss: inner agreement fails
    assert inner_violation([{1, 2, 3, 4}, {5, 6}], utility) == (
        frozenset({1, 2, 3, 4}),
        frozenset({1, 2, 3}),
    )
    assert is_outer_stable([{1, 2, 3, 4}, {5, 6}], utility)
    # everyone alone: the ring would all be strictly better together
    singletons = [{i} for i in range(1, 7)]
    assert is_inner_stable(singletons, utility)
    assert outer_violation(singletons, utility) == frozenset({5, 6})
    # outer agreement asks that *every* member of a new group gain strictly: 1 already has
    # its best in {1, 2}, so {1, 2, 3} does not break it; 2, who needs 3, can leave {1, 2}
    split_ring = [{1, 2}, {3}, {4}, {5, 6}]
    assert is_outer_stable(split_ring, utility)
    assert inner_violation(split_ring, utility) == (frozenset({1, 2}), frozenset({2}))


@pytest.mark.parametrize("num_clients", [2, 4, 6])
def test_nested_same_distribution_data_gives_no_collaboration(num_clients):
    """D1 ⊂ D2 ⊂ … from one distribution: training with a set means training on its union,
    the largest dataset in it. The largest client gains nothing and stays alone, then the next
    one, and so on ("no benefit, no collaboration")."""
    sizes = {i: 100 * (i + 1) for i in range(num_clients)}

    def utility(i, subset):
        return float(np.log(max(sizes[j] for j in subset)))

    calls = []

    def estimator(clients):
        calls.append(clients)
        return ocs_from_utility(utility)(clients)

    partition = collaboration_equilibrium(range(num_clients), estimator)
    assert _as_sets(partition) == [{i} for i in range(num_clients)]
    assert len(calls) == num_clients  # one client (the largest left) leaves per iteration
    assert is_inner_stable(partition, utility)
    assert is_outer_stable(partition, utility)


def _random_table(num_clients, rng, levels=None):
    """U(i, S) drawn independently for every (i, S); ``levels`` > 0 draws from that many
    integer values, so ties between subsets are frequent."""
    table = {}
    for i in range(num_clients):
        for subset in _subsets_with(i, range(num_clients)):
            table[(i, subset)] = (
                float(rng.integers(levels)) if levels else float(rng.uniform(0.0, 1.0))
            )
    return table_utility(table)


def _helping_utility(num_clients, rng):
    """A random "who helps whom" structure: j helps i (gain > 0) with probability 0.2 and
    hurts otherwise, half the clients gain extra from one pair only when both are present
    (synergy), and a small jitter makes every subset's value distinct, so each client's best
    subset is unique. Gives coalitions of all sizes and one to six iterations."""
    shape = (num_clients, num_clients)
    helps = rng.random(shape) < 0.2
    gains = np.where(helps, rng.uniform(0.2, 1.0, shape), -rng.uniform(0.2, 1.0, shape))
    synergy = {}
    for i in range(num_clients):
        if rng.random() < 0.5:
            j, k = rng.choice(num_clients, size=2, replace=False)
            synergy[(i, frozenset((int(j), int(k))))] = float(rng.uniform(1.0, 3.0))
    jitter = {}

    def utility(i, subset):
        value = sum(gains[i, j] for j in subset if j != i)
        value += sum(v for (owner, pair), v in synergy.items() if owner == i and pair <= subset)
        if (i, subset) not in jitter:
            jitter[(i, subset)] = float(rng.uniform(-1e-3, 1e-3))
        return value + jitter[(i, subset)]

    return utility


@pytest.mark.parametrize("seed", range(40))
def test_random_distinct_utilities_reach_equilibrium(seed):
    """With every best subset unique (continuous random values), the output satisfies both
    axioms, checked over all sub-groups and all groups."""
    rng = np.random.default_rng(seed)
    num_clients = int(rng.integers(3, 8))
    make = _random_table if seed % 2 == 0 else _helping_utility
    utility = make(num_clients, rng)
    partition = collaboration_equilibrium(range(num_clients), ocs_from_utility(utility))
    assert sorted(i for c in partition for i in c) == list(range(num_clients))
    assert inner_violation(partition, utility) is None
    assert outer_violation(partition, utility) is None


@pytest.mark.parametrize("seed", range(20))
def test_outer_agreement_holds_even_with_ties(seed):
    """Outer agreement needs only an exact OCS: the first member of any group to leave already
    had its best utility among clients that included the whole group."""
    rng = np.random.default_rng(1000 + seed)
    num_clients = int(rng.integers(3, 8))
    utility = _random_table(num_clients, rng, levels=3)
    partition = collaboration_equilibrium(range(num_clients), ocs_from_utility(utility))
    assert outer_violation(partition, utility) is None


def test_tied_best_subsets_can_break_inner_agreement():
    """Why the uniqueness assumption matters: 0 does equally well with 1 or with 2, 1 needs
    2, 2 needs 0. The tie-break picks OCS(0) = {0, 1}, closing the ring 0 → 2 → 1 → 0, yet
    {0, 2} can leave without anyone losing."""
    needs_any = {0: [{1}, {2}], 1: [{2}], 2: [{0}]}

    def utility(i, subset):
        return 1.0 if any(n <= subset for n in needs_any[i]) else 0.0

    partition = collaboration_equilibrium(range(3), ocs_from_utility(utility))
    assert _as_sets(partition) == [{0, 1, 2}]
    assert inner_violation(partition, utility) == (frozenset({0, 1, 2}), frozenset({0, 2}))
    assert is_outer_stable(partition, utility)


def test_exact_ocs_ties_prefer_smallest_then_lexicographic():
    def utility(i, subset):
        return 1.0 if len(subset) >= 2 else 0.0

    assert optimal_collaborator_set(utility, 2, {0, 1, 2, 3}) == {0, 2}

    def near(i, subset):
        return {frozenset({1}): 0.0, frozenset({1, 3}): 0.999, frozenset({0, 1}): 0.5}.get(
            subset, 1.0 if subset == frozenset({0, 1, 3}) else -1.0
        )

    assert optimal_collaborator_set(near, 1, {0, 1, 3}) == {0, 1, 3}
    assert optimal_collaborator_set(near, 1, {0, 1, 3}, tolerance=0.01) == {1, 3}
    assert max_utility(near, 1, {0, 1, 3}) == 1.0


def test_exact_ocs_is_minimal_and_optimal_on_random_tables():
    rng = np.random.default_rng(5)
    utility = _random_table(6, rng)
    clients = frozenset(range(6))
    for i in clients:
        ocs = optimal_collaborator_set(utility, i, clients)
        assert i in ocs
        assert utility(i, ocs) == max_utility(utility, i, clients)  # (1a)
        for smaller in _subsets_with(i, ocs):
            if smaller != ocs:
                assert utility(i, smaller) < utility(i, ocs)  # (1b)


def test_ratio_rule():
    weights = {0: 0.4, 1: 0.3, 2: 0.05, 3: 0.25}
    assert ocs_from_ratio_rule(weights, 0) == {0, 1}
    assert ocs_from_ratio_rule(weights, 0, threshold=0.5) == {0, 1, 3}
    assert ocs_from_ratio_rule({0: 1.0, 1: 0.7, 2: 0.69}, 0) == {0, 1}  # ≥, as the code
    assert ocs_from_ratio_rule(weights, 2) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="no weight"):
        ocs_from_ratio_rule(weights, 9)
    with pytest.raises(ValueError, match="positive"):
        ocs_from_ratio_rule({0: 0.0, 1: 1.0}, 0)
    with pytest.raises(ValueError, match="threshold"):
        ocs_from_ratio_rule(weights, 0, threshold=1.5)
    with pytest.raises(ValueError, match=">= 0"):
        ocs_from_ratio_rule({0: 1.0, 1: -0.1}, 0)


def test_ratio_rule_estimator_plugs_into_the_equilibrium():
    """An ideal d* puts weight only on the necessary collaborators (the paper's Prop. 7)."""
    needs = {0: {1}, 1: {0}, 2: {0}, 3: set()}

    def direction(i, clients):
        support = ({i} | needs[i]) & clients
        return {j: (1.0 if j in support else 1e-3) for j in clients}

    partition = collaboration_equilibrium(range(4), ratio_rule_estimator(direction))
    assert _as_sets(partition) == [{0, 1}, {2}, {3}]


def _mean_estimation_reward(centres, sizes, noise=1.0):
    """Reward of a set for its owner: −(bias² + variance) of the pooled mean as an estimate
    of the owner's mean. Same-centre peers only cut the variance; a far peer adds a bias much
    larger than the variance it saves, in every context."""

    def reward(i, subset):
        mass = sum(sizes[j] for j in subset)
        pooled = sum(sizes[j] * centres[j] for j in subset) / mass
        return -(float(np.sum((pooled - centres[i]) ** 2)) + noise / mass)

    return reward


def _two_clusters():
    centres = {j: np.array([0.0, 0.0]) if j < 3 else np.array([5.0, 5.0]) for j in range(6)}
    sizes = {0: 100, 1: 40, 2: 300, 3: 80, 4: 150, 5: 60}
    return centres, sizes


@pytest.mark.parametrize("seed", range(5))
def test_greedy_ocs_finds_the_own_cluster(seed):
    centres, sizes = _two_clusters()
    reward = _mean_estimation_reward(centres, sizes)
    rng = np.random.default_rng(seed)
    clients = frozenset(range(6))
    exact = ocs_from_utility(reward)(clients)
    for i in clients:
        expected = {j for j in clients if (j < 3) == (i < 3)}
        found = ocs_greedy(i, clients, lambda s, i=i: reward(i, s), rng)
        assert found == expected
        assert exact[i] == expected
    partition = collaboration_equilibrium(clients, greedy_estimator(reward, rng))
    assert _as_sets(partition) == [{0, 1, 2}, {3, 4, 5}]


def test_greedy_ocs_on_an_additive_reward_is_the_positive_helpers():
    """With a modular reward both double-greedy probabilities are 0 or 1: the search is exact."""
    rng = np.random.default_rng(3)
    gains = rng.normal(size=(7, 7))

    def reward(i, subset):
        return float(sum(gains[i, j] for j in subset if j != i))

    clients = frozenset(range(7))
    for i in clients:
        expected = {i} | {j for j in clients if j != i and gains[i, j] > 0}
        assert ocs_greedy(i, clients, lambda s, i=i: reward(i, s), rng) == expected
        assert optimal_collaborator_set(reward, i, clients) == expected


def test_equilibrium_re_estimates_on_the_remaining_clients():
    seen = []

    def estimator(clients):
        seen.append(set(clients))
        # 0 and 1 need each other; 2 needs 0 while 0 is around, then nobody
        ocs = {i: {i} for i in clients}
        if {0, 1} <= clients:
            ocs[0], ocs[1] = {0, 1}, {0, 1}
        if 2 in clients and 0 in clients:
            ocs[2] = {0, 2}
        return ocs

    assert _as_sets(collaboration_equilibrium([2, 1, 0], estimator)) == [{0, 1}, {2}]
    assert seen == [{0, 1, 2}, {2}]


def test_equilibrium_rejects_bad_estimates():
    with pytest.raises(ValueError, match="answered for"):
        collaboration_equilibrium([0, 1], lambda clients: {0: {0}})
    with pytest.raises(ValueError, match="not in the set"):
        collaboration_equilibrium([0, 1], lambda clients: {i: {i, 7} for i in clients})
    assert collaboration_equilibrium([], lambda clients: {}) == []


def test_stable_components_are_the_sources_of_the_condensation():
    graph = nx.DiGraph([(0, 1), (1, 0), (1, 2), (3, 2), (2, 4), (4, 2)])
    graph.add_node(5)
    assert sorted(map(sorted, stable_components(graph))) == [[0, 1], [3], [5]]


def test_checkers_validate_partitions():
    utility = needs_utility({0: set(), 1: set()})
    with pytest.raises(ValueError, match="overlap"):
        is_inner_stable([{0, 1}, {1}], utility)
    with pytest.raises(ValueError, match="empty"):
        is_outer_stable([{0, 1}, set()], utility)
    with pytest.raises(ValueError, match="limit"):
        is_outer_stable([set(range(12))], utility)
    with pytest.raises(ValueError, match="limit"):
        optimal_collaborator_set(utility, 0, set(range(20)))
    with pytest.raises(KeyError, match="no entry"):
        table_utility({})(0, frozenset({0}))
