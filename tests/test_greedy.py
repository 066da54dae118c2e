"""GGC and BGGC: the decisions of the paper's Algorithms 2 and 3."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from collabfl.strategies.greedy import add_probability, bggc, ggc


def _federation(num_clients: int, dim: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    models = {j: rng.normal(size=dim) for j in range(num_clients)}
    weights = {j: float(rng.integers(20, 200)) for j in range(num_clients)}
    target = rng.normal(size=dim) * 0.5
    return models, weights, target


def _loss_of(target):
    return lambda vector: float(np.sum((vector - target) ** 2))


def _set_reward(models, weights, target):
    """R(S) = −loss(avg(S)), averaging the whole set directly (the reference)."""

    def reward(members: frozenset[int]) -> float:
        total = sum(weights[j] for j in members)
        average = sum(models[j] * weights[j] for j in members) / total
        return -_loss_of(target)(average)

    return reward


class CountingLoader:
    """A batch loader that records how many models are resident at once."""

    def __init__(self, models):
        self.models = models
        self.resident = 0
        self.peak = 0
        self.calls: list[list[int]] = []

    @contextmanager
    def __call__(self, ids):
        self.calls.append(list(ids))
        self.resident += len(ids)
        self.peak = max(self.peak, self.resident)
        try:
            yield {j: self.models[j] for j in ids}
        finally:
            self.resident -= len(ids)


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 11, 12, 30, None])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_bggc_matches_ggc_for_the_same_seed(budget, seed):
    """Theorem 1: the batched search makes the same decisions as GGC."""
    num_clients = 12
    models, weights, target = _federation(num_clients, seed=seed)
    owner, candidates = 0, list(range(1, num_clients))
    reference = ggc(
        owner, candidates, _set_reward(models, weights, target), budget, np.random.default_rng(seed)
    )
    loader = CountingLoader(models)
    selection = bggc(
        models[owner],
        weights[owner],
        candidates,
        weights,
        loader,
        _loss_of(target),
        budget,
        budget,
        np.random.default_rng(seed),
    )
    assert selection.chosen == reference
    assert loader.peak <= (budget or num_clients)
    chosen = [owner, *selection.chosen]
    expected = sum(models[j] * weights[j] for j in chosen) / sum(weights[j] for j in chosen)
    np.testing.assert_allclose(selection.aggregate, expected, rtol=1e-10)
    if budget is not None:
        assert len(selection.chosen) <= budget


def test_theorem_one_is_not_vacuous():
    """Different seeds give different selections, so agreement above means something."""
    models, weights, target = _federation(12, seed=5)
    reward = _set_reward(models, weights, target)
    picks = {
        tuple(ggc(0, list(range(1, 12)), reward, None, np.random.default_rng(s))) for s in range(10)
    }
    assert len(picks) > 1


def test_bggc_batches_and_evaluations():
    models, weights, target = _federation(10)
    loader = CountingLoader(models)
    selection = bggc(
        models[0],
        weights[0],
        list(range(1, 10)),
        weights,
        loader,
        _loss_of(target),
        3,
        3,
        np.random.default_rng(0),
    )
    assert loader.peak <= 3
    assert all(len(call) <= 3 for call in loader.calls)
    # First pass: ceil(9 / 3) batches for Y's sum; second pass stops once 3 are chosen.
    assert selection.batches_loaded == len(loader.calls) >= 4
    # Two evaluations per visited candidate plus R(X) and R(Y) at the start.
    visited = selection.reward_evaluations - 2
    assert visited % 2 == 0 and 2 <= visited // 2 <= 9


def test_single_batch_loads_candidates_once():
    models, weights, target = _federation(8)
    loader = CountingLoader(models)
    bggc(
        models[0],
        weights[0],
        list(range(1, 8)),
        weights,
        loader,
        _loss_of(target),
        None,
        None,
        np.random.default_rng(0),
    )
    assert len(loader.calls) == 1


def test_synergy_pair_is_selected():
    """Appendix A: two peers that only help together; each alone is useless."""
    owner, pair, harmful = 0, {1, 2}, {3, 4, 5}

    def reward(members: frozenset[int]) -> float:
        return float(pair <= members) - 0.1 * len(members & harmful)

    for seed in range(20):
        chosen = ggc(owner, [1, 2, 3, 4, 5], reward, None, np.random.default_rng(seed))
        assert set(chosen) == pair


def test_every_collaborator_hurts_gives_empty_set():
    def reward(members: frozenset[int]) -> float:
        return -float(len(members) - 1)

    for seed in range(20):
        assert ggc(0, list(range(1, 9)), reward, None, np.random.default_rng(seed)) == []


def test_budget_caps_selection_and_zero_budget_selects_nobody():
    reward = lambda members: float(len(members))  # noqa: E731 - everyone helps
    assert len(ggc(0, list(range(1, 10)), reward, 4, np.random.default_rng(0))) == 4
    assert ggc(0, list(range(1, 10)), reward, 0, np.random.default_rng(0)) == []
    assert ggc(0, [], reward, 3, np.random.default_rng(0)) == []


def test_owner_among_candidates_is_refused():
    with pytest.raises(ValueError, match="owner"):
        ggc(1, [1, 2], lambda s: 0.0, None, np.random.default_rng(0))


def test_unavailable_peers_are_skipped():
    models, weights, target = _federation(6)

    @contextmanager
    def loader(ids):
        yield {j: models[j] for j in ids if j != 3}

    selection = bggc(
        models[0],
        weights[0],
        [1, 2, 3, 4, 5],
        weights,
        loader,
        _loss_of(target),
        None,
        None,
        np.random.default_rng(0),
    )
    assert 3 not in selection.chosen


@pytest.mark.parametrize(
    ("gain_add", "gain_remove", "expected"),
    [(0.0, 0.0, 1.0), (-1.0, -2.0, 1.0), (1.0, 0.0, 1.0), (0.0, 1.0, 0.0), (1.0, 3.0, 0.25)],
)
def test_add_probability(gain_add, gain_remove, expected):
    assert add_probability(gain_add, gain_remove) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("gain_add", "gain_remove", "expected"),
    [(0.0, 0.0, 0.0), (-1.0, -2.0, 1.0), (-2.0, -1.0, 0.0), (1.0, 3.0, 0.25), (0.0, 1.0, 0.0)],
)
def test_add_probability_larger_tie_rule(gain_add, gain_remove, expected):
    assert add_probability(gain_add, gain_remove, "larger") == pytest.approx(expected)


def test_the_tie_rule_decides_a_peer_that_changes_nothing():
    """A peer whose presence leaves the reward unchanged: the paper adds it, 'larger' does not."""
    reward = lambda members: 1.0  # noqa: E731 - every set is as good as any other
    candidates = list(range(1, 6))
    assert ggc(0, candidates, reward, None, np.random.default_rng(0)) != []
    assert ggc(0, candidates, reward, None, np.random.default_rng(0), tie="larger") == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bggc_matches_ggc_under_the_larger_tie_rule(seed):
    models, weights, target = _federation(12, seed=seed)
    owner, candidates = 0, list(range(1, 12))
    reward = _set_reward(models, weights, target)
    reference = ggc(owner, candidates, reward, 4, np.random.default_rng(seed), tie="larger")
    selection = bggc(
        models[owner], weights[owner], candidates, weights, CountingLoader(models),
        _loss_of(target), 4, 4, np.random.default_rng(seed), tie="larger",
    )  # fmt: skip
    assert selection.chosen == reference
