"""Greedy collaborator selection of DPFL: GGC (Algorithm 2) and its batched form BGGC (Algorithm 3).

Both are the randomized double greedy of Buchbinder et al. (2015) applied to a client's
validation reward. ``ggc`` works on any set function and is the reference; ``bggc`` works in
model space with running weighted sums, so every step costs exactly two reward evaluations
and never more than ``batch_size`` peer models are resident. With the same seed both make the
same decisions (the paper's Theorem 1), which the tests check.

The functions are generic over the vector type: anything with ``+``, ``-``, ``*`` by a float
and ``/`` by a float (``streaming.Vector``: torch tensors, NumPy arrays).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal

import numpy as np

from collabfl.kernel.devices import require_same_device
from collabfl.strategies.streaming import BatchLoader, V, add_models, batches

TieRule = Literal["add", "larger"]
"""What GGC does when neither gain is positive: ``add`` (the paper and its code: an
indifferent peer costs nothing to keep), or ``larger``: add only when the raw add gain is
the larger of the two (an opt-in variant that keeps peers that hurt less than they help out)."""


def add_probability(gain_add: float, gain_remove: float, tie: TieRule = "add") -> float:
    """Probability of adding a candidate given the two marginal gains.

    Negative gains count as zero; when both are zero, ``tie`` decides (see ``TieRule``).
    """
    a = max(gain_add, 0.0)
    b = max(gain_remove, 0.0)
    if a == 0.0 and b == 0.0:
        return 1.0 if tie == "add" or gain_add > gain_remove else 0.0
    return a / (a + b)


def visiting_order(candidates: Sequence[int], rng: np.random.Generator) -> list[int]:
    """The seeded order in which candidates are considered (shared by GGC and BGGC)."""
    return [candidates[i] for i in rng.permutation(len(candidates))]


def _budget_reached(num_chosen: int, budget: int | None) -> bool:
    return budget is not None and num_chosen >= budget


def ggc(
    owner: int,
    candidates: Sequence[int],
    reward: Callable[[frozenset[int]], float],
    budget: int | None,
    rng: np.random.Generator,
    tie: TieRule = "add",
) -> list[int]:
    """Select collaborators for ``owner`` from ``candidates`` by randomized double greedy.

    ``reward(S)`` scores a set that contains the owner (higher is better). ``budget`` caps
    the number of collaborators (None: unlimited). Returns the chosen peers in the order
    they were added. Each reward value is computed once per distinct set visited.
    """
    if owner in candidates:
        raise ValueError(f"owner {owner} must not be among its own candidates")
    if budget == 0 or not candidates:
        return []
    chosen: list[int] = []
    x = frozenset([owner])
    y = frozenset([owner, *candidates])
    reward_x, reward_y = reward(x), reward(y)
    for j in visiting_order(candidates, rng):
        reward_x_add = reward(x | {j})
        reward_y_remove = reward(y - {j})
        p = add_probability(reward_x_add - reward_x, reward_y_remove - reward_y, tie)
        if rng.random() < p:
            x, reward_x = x | {j}, reward_x_add
            chosen.append(j)
        else:
            y, reward_y = y - {j}, reward_y_remove
        if _budget_reached(len(chosen), budget):
            break
    return chosen


@dataclass(frozen=True)
class Selection(Generic[V]):
    """Outcome of a model-space search: the chosen peers and the aggregate they give."""

    chosen: list[int]
    aggregate: V
    """Weighted average of the owner's and the chosen peers' models (the new local model)."""
    reward_evaluations: int
    batches_loaded: int


def bggc(
    own_model: V,
    own_weight: float,
    candidates: Sequence[int],
    weights: Mapping[int, float],
    load: BatchLoader[V],
    loss: Callable[[V], float],
    budget: int | None,
    batch_size: int | None,
    rng: np.random.Generator,
    tie: TieRule = "add",
) -> Selection[V]:
    """Batched greedy collaborator search in model space (BGGC; GGC when one batch fits all).

    The reward of a set is minus the owner's validation ``loss`` of its weighted average.
    ``load(ids)`` must make those peers' models resident inside a ``with`` block; it is called
    with at most ``batch_size`` ids at a time (None: all candidates in one batch) and may
    leave out peers it could not fetch, which are then skipped. When all
    candidates fit in one batch they are loaded once and kept for both passes; otherwise a
    first pass accumulates the running sum of the full set Y and a second pass decides, batch
    by batch, in the seeded visiting order.
    """
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
    if budget == 0 or not candidates:
        return Selection([], own_model, 0, 0)
    size = len(candidates) if batch_size is None else batch_size
    order = visiting_order(candidates, rng)
    if size >= len(candidates):
        with load(list(candidates)) as models:
            sum_y, total_y = add_models(own_model * own_weight, own_weight, models, weights)
            state = _SearchState(own_model, own_weight, sum_y, total_y, loss, tie)
            state.visit(order, models, weights, rng, budget)
            return state.selection(batches_loaded=1)

    sum_y, total_y = own_model * own_weight, own_weight
    batches_loaded = 0
    for batch in batches(list(candidates), size):
        with load(batch) as models:
            batches_loaded += 1
            sum_y, total_y = add_models(sum_y, total_y, models, weights)
    state = _SearchState(own_model, own_weight, sum_y, total_y, loss, tie)
    for batch in batches(order, size):
        with load(batch) as models:
            batches_loaded += 1
            if state.visit(batch, models, weights, rng, budget):
                break
    return state.selection(batches_loaded)


class _SearchState(Generic[V]):
    """Running sums of X (chosen so far) and Y (not yet rejected), with cached rewards."""

    def __init__(
        self,
        own_model: V,
        own_weight: float,
        sum_y: V,
        total_y: float,
        loss: Callable[[V], float],
        tie: TieRule,
    ) -> None:
        self.loss = loss
        self.tie = tie
        self.sum_x, self.total_x = own_model * own_weight, own_weight
        self.sum_y, self.total_y = sum_y, total_y
        self.reward_x = -loss(self.sum_x / self.total_x)
        self.reward_y = -loss(self.sum_y / self.total_y)
        self.evaluations = 2
        self.chosen: list[int] = []

    def visit(
        self,
        batch: Sequence[int],
        models: Mapping[int, V],
        weights: Mapping[int, float],
        rng: np.random.Generator,
        budget: int | None,
    ) -> bool:
        """Decide on each peer of ``batch`` in order; True once the budget is reached."""
        for j in batch:
            if j not in models:  # the peer vanished or sent a bad model: skip it this round
                continue
            w_j, p_j = models[j], weights[j]
            require_same_device(self.sum_x, w_j, f"weighing peer {j}'s model")
            weighted = w_j * p_j  # once for both sides: the same product, one pass fewer
            sum_x_add, total_x_add = self.sum_x + weighted, self.total_x + p_j
            sum_y_remove, total_y_remove = self.sum_y - weighted, self.total_y - p_j
            reward_x_add = -self.loss(sum_x_add / total_x_add)
            reward_y_remove = -self.loss(sum_y_remove / total_y_remove)
            self.evaluations += 2
            gain_add, gain_remove = reward_x_add - self.reward_x, reward_y_remove - self.reward_y
            p = add_probability(gain_add, gain_remove, self.tie)
            if rng.random() < p:
                self.sum_x, self.total_x, self.reward_x = sum_x_add, total_x_add, reward_x_add
                self.chosen.append(j)
            else:
                self.sum_y, self.total_y = sum_y_remove, total_y_remove
                self.reward_y = reward_y_remove
            if _budget_reached(len(self.chosen), budget):
                return True
        return False

    def selection(self, batches_loaded: int) -> Selection[V]:
        return Selection(self.chosen, self.sum_x / self.total_x, self.evaluations, batches_loaded)
