"""FedCollab: the coalition objective, its incremental evaluator, the solver and placement."""

from __future__ import annotations

import numpy as np
import pytest

from collabfl.strategies.fedcollab import (
    CoalitionState,
    canonical_labels,
    coalition_objective,
    coalitions_of,
    descend,
    place_new_client,
    solve_coalitions,
)


def _random_problem(n: int, seed: int, asymmetric: bool = True):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 2000, size=n).astype(float)
    distances = rng.uniform(-0.1, 1.0, size=(n, n))  # a few negatives, as estimates can be
    if not asymmetric:
        distances = (distances + distances.T) / 2
    return sizes, distances


def _four_groups(seed: int = 0):
    """The paper's label-shift layout: 5 large clients of type A (0–4), 5 large of type B
    (5–9), 10 small clients (10–19) alike across types: small distances within each type and
    among the small clients, moderate between small and large, large between A and B."""
    rng = np.random.default_rng(seed)
    kind = np.array([0] * 5 + [1] * 5 + [2] * 10)
    sizes = np.where(kind < 2, 1000.0, 50.0)
    same = kind[:, None] == kind[None, :]
    small_involved = (kind[:, None] == 2) | (kind[None, :] == 2)
    distances = np.where(same, 0.02, np.where(small_involved, 0.3, 1.0))
    distances = distances + rng.uniform(0, 0.02, size=distances.shape)
    return sizes, distances


def _by_hand(groups, sizes, distances, c):
    """L written out term by term, independent of the module."""
    d = np.maximum(np.asarray(distances, dtype=float), 0)
    total = 0.0
    for group in groups:
        mass = sum(sizes[j] for j in group)
        total += len(group) * c / np.sqrt(mass)
        for i in group:
            for j in group:
                if i != j:
                    total += sizes[j] / mass * d[i, j]
    return total


def test_objective_matches_the_formula_written_out():
    sizes = np.array([100.0, 300.0, 50.0, 400.0])
    distances = np.array(
        [
            [0.0, 0.2, 0.7, 0.1],
            [0.3, 0.0, 0.5, 0.4],
            [0.6, 0.5, 0.0, 0.9],
            [0.2, 0.1, 0.8, 0.0],
        ]
    )
    assignment = [5, 5, 2, 5]  # ids are arbitrary labels
    expected = _by_hand([[0, 1, 3], [2]], sizes, distances, 3.0)
    assert coalition_objective(assignment, sizes, distances, 3.0) == pytest.approx(expected)
    # singleton term alone: C / sqrt(m)
    assert coalition_objective([0, 1, 2, 3], sizes, distances, 2.0) == pytest.approx(
        sum(2.0 / np.sqrt(s) for s in sizes)
    )


def test_negative_distances_are_clipped_and_the_diagonal_ignored():
    sizes, distances = _random_problem(6, seed=1)
    noisy = distances.copy()
    np.fill_diagonal(noisy, 0.5)
    clean = np.maximum(distances, 0)
    np.fill_diagonal(clean, 0)
    assignment = [0, 0, 1, 1, 1, 2]
    assert coalition_objective(assignment, sizes, noisy, 4.0) == pytest.approx(
        coalition_objective(assignment, sizes, clean, 4.0)
    )
    assert coalition_objective(assignment, sizes, noisy, 4.0) == pytest.approx(
        _by_hand([[0, 1], [2, 3, 4], [5]], sizes, clean, 4.0)
    )


@pytest.mark.parametrize("seed", range(5))
def test_incremental_deltas_and_moves_match_direct_evaluation(seed):
    n = 12
    sizes, distances = _random_problem(n, seed)
    rng = np.random.default_rng(100 + seed)
    labels = rng.integers(0, 4, size=n)
    state = CoalitionState(labels, sizes, distances, 2.5)
    assert state.objective == pytest.approx(coalition_objective(labels, sizes, distances, 2.5))
    for _ in range(60):
        x = int(rng.integers(n))
        current = coalition_objective(state.labels, sizes, distances, 2.5)
        deltas = state.deltas(x)
        for target in range(n):  # every id, empty ones included (a new singleton)
            moved = state.labels.copy()
            moved[x] = target
            direct = coalition_objective(moved, sizes, distances, 2.5) - current
            assert deltas[target] == pytest.approx(direct, abs=1e-9)
        target = int(rng.integers(n))
        expected_change = state.delta(x, target)
        state.move(x, target)
        direct_now = coalition_objective(state.labels, sizes, distances, 2.5)
        assert state.objective == pytest.approx(direct_now, abs=1e-9)
        assert direct_now - current == pytest.approx(expected_change, abs=1e-9)
    rebuilt = CoalitionState(state.labels, sizes, distances, 2.5)
    for name in ("count", "mass", "shift", "cost", "row", "col"):
        np.testing.assert_allclose(getattr(state, name), getattr(rebuilt, name), atol=1e-9)


def _reference_solver(sizes, distances, c, rng, restarts, max_passes):
    """Algorithm 2 re-evaluating L from scratch for every candidate id (the official way)."""
    n = len(sizes)
    best, best_value = None, np.inf
    for _ in range(restarts):
        labels = np.arange(n)
        for _ in range(max_passes):
            moved = False
            for x in rng.permutation(n):
                current = coalition_objective(labels, sizes, distances, c)
                used = set(labels.tolist())
                empty = [k for k in range(n) if k not in used]
                candidates = sorted(k for k in used if k != labels[x])
                if np.sum(labels == labels[x]) > 1 and empty:
                    candidates = sorted([*candidates, empty[0]])
                values = []
                for k in candidates:
                    trial = labels.copy()
                    trial[x] = k
                    values.append(coalition_objective(trial, sizes, distances, c))
                if values and min(values) < current - 1e-12 * (1 + abs(current)):
                    labels[x] = candidates[int(np.argmin(values))]
                    moved = True
            if not moved:
                break
        value = coalition_objective(labels, sizes, distances, c)
        if value < best_value:
            best, best_value = canonical_labels(labels), value
    return best, best_value


@pytest.mark.parametrize("seed", range(4))
def test_solver_makes_the_same_decisions_as_direct_re_evaluation(seed):
    sizes, distances = _random_problem(9, seed)
    c = [0.5, 2.0, 5.0, 10.0][seed]
    fast = solve_coalitions(sizes, distances, c, np.random.default_rng(seed), restarts=4)
    slow = _reference_solver(sizes, distances, c, np.random.default_rng(seed), 4, 100)
    np.testing.assert_array_equal(fast[0], slow[0])
    assert fast[1] == pytest.approx(slow[1])


@pytest.mark.parametrize("seed", range(3))
def test_c_zero_keeps_everyone_local(seed):
    sizes, distances = _random_problem(10, seed)
    distances[0, 1] = distances[1, 0] = 0.0  # even a free partner does not strictly help
    assignment, value = solve_coalitions(sizes, distances, 0.0, seed, restarts=5)
    np.testing.assert_array_equal(assignment, np.arange(10))
    assert value == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_very_large_c_forms_one_global_coalition(seed):
    sizes, distances = _random_problem(10, seed)
    assignment, _ = solve_coalitions(sizes, distances, 1e6, seed, restarts=5)
    np.testing.assert_array_equal(assignment, np.zeros(10))


def test_identical_distributions_collaborate_fully():
    """Corollary 3.4(1): with D = 0 global FL minimises the bound, for any C > 0."""
    sizes, _ = _random_problem(8, seed=3)
    assignment, _ = solve_coalitions(sizes, np.zeros((8, 8)), 0.1, 0, restarts=3)
    np.testing.assert_array_equal(assignment, np.zeros(8))


def test_four_group_structure_large_by_type_small_pooled():
    sizes, distances = _four_groups()
    assignment, value = solve_coalitions(sizes, distances, 4.0, np.random.default_rng(0))
    assert coalitions_of(assignment) == [list(range(5)), list(range(5, 10)), list(range(10, 20))]
    assert value == pytest.approx(coalition_objective(assignment, sizes, distances, 4.0))


def test_four_groups_with_small_c_leave_large_clients_alone():
    """C trades generalisation for shift: small C keeps the data-rich clients local."""
    sizes, distances = _four_groups()
    assignment, _ = solve_coalitions(sizes, distances, 0.5, 0, restarts=10)
    assert coalitions_of(assignment) == [[k] for k in range(10)] + [list(range(10, 20))]


def test_solver_is_deterministic_in_the_seed_and_returns_canonical_labels():
    sizes, distances = _random_problem(25, seed=7, asymmetric=False)
    first = solve_coalitions(sizes, distances, 6.0, 11, restarts=10)
    second = solve_coalitions(sizes, distances, 6.0, np.random.default_rng(11), restarts=10)
    np.testing.assert_array_equal(first[0], second[0])
    assert first[1] == second[1]
    np.testing.assert_array_equal(first[0], canonical_labels(first[0]))
    assert first[1] == pytest.approx(coalition_objective(first[0], sizes, distances, 6.0))


def test_descend_stays_at_a_local_optimum_and_respects_max_passes():
    sizes, distances = _four_groups()
    solution, value = solve_coalitions(sizes, distances, 4.0, 0, restarts=5)
    state = CoalitionState(solution, sizes, distances, 4.0)
    assert descend(state, np.random.default_rng(1)) == 1  # one pass, no move
    np.testing.assert_array_equal(state.labels, solution)
    fresh = CoalitionState.singletons(sizes, distances, 4.0)
    assert descend(fresh, np.random.default_rng(1), max_passes=1) == 1
    assert fresh.objective < CoalitionState.singletons(sizes, distances, 4.0).objective
    assert fresh.objective == pytest.approx(
        coalition_objective(fresh.labels, sizes, distances, 4.0)
    )
    assert fresh.objective >= value - 1e-9


def test_more_restarts_never_do_worse():
    sizes, distances = _random_problem(30, seed=2, asymmetric=False)
    values = [solve_coalitions(sizes, distances, 8.0, 5, restarts=r)[1] for r in (1, 5, 20)]
    assert values[0] >= values[1] >= values[2]


def test_place_new_client_joins_its_own_type():
    sizes, distances = _four_groups()
    existing = np.array([9] * 4 + [4] * 5 + [7] * 10)  # clients 1..19 with arbitrary ids
    order = [*range(1, 20), 0]  # client 0 (large, type A) arrives last
    sub_sizes, sub_distances = sizes[order], distances[np.ix_(order, order)]
    assert place_new_client(existing, sub_sizes, sub_distances, 4.0) == 9
    # a small newcomer pools with the small clients
    order = [*range(0, 19), 19]
    base = np.array([0] * 5 + [1] * 5 + [2] * 9)
    assert place_new_client(base, sizes[order], distances[np.ix_(order, order)], 4.0) == 2


def test_place_new_client_stays_alone_when_that_is_lower():
    sizes, distances = _four_groups()
    sizes = np.append(sizes, 5000.0)
    far = np.ones((21, 21))
    far[:20, :20] = distances
    far[20, 20] = 0.0
    base = np.array([0] * 5 + [1] * 5 + [2] * 10)
    assert place_new_client(base, sizes, far, 4.0) == 3
    forced = place_new_client(base, sizes, far, 4.0, allow_singleton=False)
    assert forced in (0, 1, 2)
    state = CoalitionState(np.append(base, 3), sizes, far, 4.0)
    assert forced == int(np.argmin(state.deltas(20)[:3]))


@pytest.mark.parametrize(
    ("sizes", "distances", "c", "message"),
    [
        ([1.0, 2.0], np.zeros((3, 3)), 1.0, "2×2"),
        ([1.0, 0.0], np.zeros((2, 2)), 1.0, "positive"),
        ([1.0, -3.0], np.zeros((2, 2)), 1.0, "positive"),
        ([1.0, np.nan], np.zeros((2, 2)), 1.0, "positive"),
        ([], np.zeros((0, 0)), 1.0, "non-empty"),
        ([[1.0, 2.0]], np.zeros((2, 2)), 1.0, "1-D"),
        ([1.0, 2.0], [[0.0, np.nan], [0.1, 0.0]], 1.0, "finite"),
        ([1.0, 2.0], np.zeros((2, 2)), -1.0, "C must"),
        ([1.0, 2.0], np.zeros((2, 2)), np.inf, "C must"),
    ],
)
def test_invalid_problems_raise(sizes, distances, c, message):
    with pytest.raises(ValueError, match=message):
        coalition_objective([0] * max(len(np.ravel(sizes)), 1), sizes, distances, c)
    with pytest.raises(ValueError, match=message):
        solve_coalitions(sizes, distances, c, 0, restarts=1)


def test_invalid_assignments_and_settings_raise():
    sizes, distances = _random_problem(4, seed=0)
    with pytest.raises(ValueError, match="one coalition id per client"):
        coalition_objective([0, 0, 1], sizes, distances, 1.0)
    with pytest.raises(ValueError, match="integer"):
        coalition_objective([0, 0.5, 1, 1], sizes, distances, 1.0)
    with pytest.raises(ValueError, match="integer"):
        coalition_objective([True, False, True, True], sizes, distances, 1.0)
    with pytest.raises(ValueError, match=r"0\.\.3"):
        CoalitionState([0, 0, 4, 1], sizes, distances, 1.0)
    with pytest.raises(ValueError, match="restarts"):
        solve_coalitions(sizes, distances, 1.0, 0, restarts=0)
    with pytest.raises(ValueError, match="max_passes"):
        solve_coalitions(sizes, distances, 1.0, 0, max_passes=0)
    with pytest.raises(ValueError, match="one coalition id per client"):
        place_new_client([0, 0, 1, 1], sizes, distances, 1.0)  # needs N − 1 ids


def test_single_client_and_empty_placement():
    assignment, value = solve_coalitions([10.0], [[0.0]], 3.0, 0)
    np.testing.assert_array_equal(assignment, [0])
    assert value == pytest.approx(3.0 / np.sqrt(10.0))
    assert place_new_client([], [10.0], [[0.0]], 1.0) == 0
    with pytest.raises(ValueError, match="no existing coalition"):
        place_new_client([], [10.0], [[0.0]], 1.0, allow_singleton=False)
