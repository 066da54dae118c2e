"""BGGC's in-place, slice-by-slice arithmetic gives bit-identical results to the whole-vector
running sums it replaced (so defaults reproduce earlier runs exactly), and its averages and
streaming averages hold no model-sized temporaries."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

from collabfl.strategies import inplace
from collabfl.strategies.greedy import add_probability, bggc, visiting_order
from collabfl.strategies.streaming import batches, streaming_average


def _federation(num_clients: int, dim: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    models = {j: torch.randn(dim, generator=generator) for j in range(num_clients)}
    weights = {j: float(17 + 13 * j) for j in range(num_clients)}
    target = torch.randn(dim, generator=generator) * 0.5
    return models, weights, target


def _reference(own, own_weight, candidates, weights, models, loss, budget, rng):
    """The whole-vector formulation: new tensors for every sum, product and average."""
    order = visiting_order(candidates, rng)
    sum_y, total_y = own * own_weight, own_weight
    for j in candidates:
        sum_y, total_y = sum_y + models[j] * weights[j], total_y + weights[j]
    sum_x, total_x = own * own_weight, own_weight
    reward_x, reward_y = -loss(sum_x / total_x), -loss(sum_y / total_y)
    chosen = []
    for j in order:
        weighted = models[j] * weights[j]
        sum_x_add, total_x_add = sum_x + weighted, total_x + weights[j]
        sum_y_remove, total_y_remove = sum_y - weighted, total_y - weights[j]
        reward_x_add = -loss(sum_x_add / total_x_add)
        reward_y_remove = -loss(sum_y_remove / total_y_remove)
        if rng.random() < add_probability(reward_x_add - reward_x, reward_y_remove - reward_y):
            sum_x, total_x, reward_x = sum_x_add, total_x_add, reward_x_add
            chosen.append(j)
        else:
            sum_y, total_y, reward_y = sum_y_remove, total_y_remove, reward_y_remove
        if budget is not None and len(chosen) >= budget:
            break
    return chosen, sum_x / total_x


def _loader(models):
    @contextmanager
    def load(ids):
        yield {j: models[j] for j in ids}

    return load


@pytest.mark.parametrize("budget", [1, 2, 3, None])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bggc_is_bit_identical_to_whole_vector_sums(budget, seed, monkeypatch):
    monkeypatch.setattr(inplace, "SLICE", 7)  # several slices and a ragged last one
    models, weights, target = _federation(9, 40, seed)
    seen: list[list[float]] = [[], []]

    def recorder(record):
        def loss(vector):
            value = float(((vector - target) ** 2).sum())
            record.append(value)
            return value

        return loss

    candidates = list(range(1, 9))
    chosen, aggregate = _reference(
        models[0], weights[0], candidates, weights, models, recorder(seen[0]), budget,
        np.random.default_rng(seed),
    )  # fmt: skip
    selection = bggc(
        models[0], weights[0], candidates, weights, _loader(models), recorder(seen[1]), budget,
        budget, np.random.default_rng(seed),
    )  # fmt: skip
    assert selection.chosen == chosen
    assert torch.equal(selection.aggregate, aggregate)
    assert seen[0] == seen[1][: len(seen[0])]


def test_streaming_average_is_bit_identical(monkeypatch):
    monkeypatch.setattr(inplace, "SLICE", 5)
    models, weights, _ = _federation(6, 23, 3)
    peers = [1, 2, 3, 4, 5]
    expected, total = models[0] * weights[0], weights[0]
    for j in peers:
        expected, total = expected + models[j] * weights[j], total + weights[j]
    average, used = streaming_average(models[0], weights[0], peers, weights, _loader(models), 2)
    assert used == peers
    assert torch.equal(average, expected / total)


def test_batches_of_the_second_pass_leave_room_for_the_sum_of_x():
    models, weights, target = _federation(8, 10, 0)
    calls: list[list[int]] = []

    @contextmanager
    def load(ids):
        calls.append(list(ids))
        yield {j: models[j] for j in ids}

    loss = lambda vector: float(((vector - target) ** 2).sum())  # noqa: E731
    bggc(models[0], 1.0, list(range(1, 8)), weights, load, loss, 3, 3, np.random.default_rng(0))
    first_pass = list(batches(list(range(1, 8)), 3))
    assert [list(b) for b in first_pass] == calls[: len(first_pass)]
    assert all(len(call) <= 2 for call in calls[len(first_pass) :])
