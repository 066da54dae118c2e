"""Greedy collaborator selection of DPFL: GGC (Algorithm 2) and its batched form BGGC (Algorithm 3).

Both are the randomized double greedy of Buchbinder et al. (2015) applied to a client's
validation reward. ``ggc`` works on any set function and is the reference; ``bggc`` works in
model space with running weighted sums, so every step costs exactly two reward evaluations,
never more than ``batch_size`` peer models are resident and, with its sums, never more than
``batch_size`` + 1 models. With the same seed both make the
same decisions (the paper's Theorem 1), which the tests check.

With a ``LookAhead`` (GPU clients, ``dpfl.batched_rewards``), ``bggc`` decides two resident
peers at a time from six rewards read in one batched call: the current step's two and the
next step's two for either outcome of the current draw. The draws, their order and the
averages are the same; the losses agree with one-at-a-time evaluation to float rounding.

The functions are generic over the vector type: anything with ``+``, ``-``, ``*`` by a float
and ``/`` by a float, and slices (``inplace.Vector``: torch tensors, NumPy arrays).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

import numpy as np

from collabfl.kernel.devices import require_same_device
from collabfl.strategies.inplace import V, Vector, add_scaled, average_into, divide
from collabfl.strategies.streaming import BatchLoader, add_models, batches

TieRule = Literal["add", "larger"]
"""What GGC does when neither gain is positive: ``add`` (the paper and its code: an
indifferent peer costs nothing to keep), or ``larger``: add only when the raw add gain is
the larger of the two (an opt-in variant that keeps peers that hurt less than they help out)."""


V_co = TypeVar("V_co", bound=Vector, covariant=True)


class LookAhead(Protocol[V_co]):
    """Model-sized rows a search writes candidate averages into, and the losses of the first
    ``count`` of them in one call (kernel/batched_eval.py's ``CandidateModels``)."""

    @property
    def rows(self) -> Sequence[V_co]: ...

    def losses(self, count: int) -> list[float]: ...


LOOKAHEAD_ROWS = 6
"""Two steps' candidates: R(X ∪ j), R(Y ∖ j), then R(X ∪ j ∪ k), R(Y ∖ k) if j is added,
R(X ∪ k), R(Y ∖ j ∖ k) if it is not."""


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
    scratch: V | None = None,
    lookahead: LookAhead[V] | None = None,
) -> Selection[V]:
    """Batched greedy collaborator search in model space (BGGC; GGC when one batch fits all).

    The reward of a set is minus the owner's validation ``loss`` of its weighted average,
    which is written into ``scratch`` first (a model-sized vector ``loss`` is then called
    with; the node's workspace, so no average is ever a copy; None: one is allocated).
    ``load(ids)`` must make those peers' models resident inside a ``with`` block; it is called
    with at most ``batch_size`` ids at a time (None: all candidates in one batch) and may
    leave out peers it could not fetch, which are then skipped. When all candidates fit in
    one batch they are loaded once and kept for both passes; otherwise a first pass
    accumulates the running sum of the full set Y and a second pass decides, in the seeded
    visiting order, on batches of one fewer peer: the slot freed holds X's running sum.
    Besides ``scratch`` (and ``lookahead``'s rows), the search never holds more than
    ``batch_size`` + 1 models. ``lookahead``: decide consecutive resident peers in pairs from
    one batched call of six losses (see the module docstring).
    """
    if lookahead is not None and len(lookahead.rows) < LOOKAHEAD_ROWS:
        raise ValueError(f"a look-ahead needs {LOOKAHEAD_ROWS} rows, got {len(lookahead.rows)}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
    if budget == 0 or not candidates:
        return Selection([], own_model, 0, 0)
    size = len(candidates) if batch_size is None else batch_size
    order = visiting_order(candidates, rng)
    scratch = own_model * 1.0 if scratch is None else scratch
    if size >= len(candidates):
        with load(list(candidates)) as models:
            state = _SearchState(
                own_model,
                own_weight,
                *add_models(own_model * own_weight, own_weight, models, weights),
                loss,
                tie,
                scratch,
                fold_each=batch_size is None,
                lookahead=lookahead,
            )
            state.visit(order, models, weights, rng, budget)
            return state.selection(batches_loaded=1)

    sum_y = _sum_of_all(own_model, own_weight, candidates, weights, load, size)
    state = _SearchState(own_model, own_weight, *sum_y, loss, tie, scratch, lookahead=lookahead)
    del sum_y  # the state alone holds Y's sum, and drops it before X's average is made
    batches_loaded = math.ceil(len(candidates) / size)
    for batch in batches(order, max(size - 1, 1)):
        with load(batch) as models:
            batches_loaded += 1
            if state.visit(batch, models, weights, rng, budget):
                return state.selection(batches_loaded)
            state.fold()
    return state.selection(batches_loaded)


def _sum_of_all(
    own_model: V,
    own_weight: float,
    candidates: Sequence[int],
    weights: Mapping[int, float],
    load: BatchLoader[V],
    size: int,
) -> tuple[V, float]:
    """BGGC's first pass: the weighted sum of the owner and every candidate, and its weight."""
    sum_y, total_y = own_model * own_weight, own_weight
    for batch in batches(list(candidates), size):
        with load(batch) as models:
            sum_y, total_y = add_models(sum_y, total_y, models, weights)
    return sum_y, total_y


class _SearchState(Generic[V]):
    """Running sums of X (chosen so far) and Y (not yet rejected), with cached rewards.

    Y's sum is one vector, updated in place. X's is a base (the owner's weighted model until
    a chosen peer's batch is dropped, then a running sum) plus the chosen peers still
    resident, added up slice by slice into ``scratch`` when a reward needs them: at most
    ``batch_size`` - 1 vector additions more per evaluation, and one model less held (with
    no batch size, each chosen peer is folded in at once).
    """

    def __init__(
        self,
        own_model: V,
        own_weight: float,
        sum_y: V,
        total_y: float,
        loss: Callable[[V], float],
        tie: TieRule,
        scratch: V,
        fold_each: bool = False,
        lookahead: LookAhead[V] | None = None,
    ) -> None:
        self.own_model, self.own_weight = own_model, own_weight
        self.loss = loss
        self.tie = tie
        self.scratch = scratch
        self.fold_each = fold_each
        """Fold each chosen peer into X's sum at once: no memory bound to keep (no batch
        size), and no growing additions per evaluation either."""
        self.lookahead = lookahead
        self.base_x: V | None = None
        """X's running sum without ``resident_x`` (None: own model × own weight, not made)."""
        self.resident_x: list[tuple[V, float]] = []
        """The chosen peers of the resident batch and their weights, in the order chosen."""
        self.total_x = own_weight
        self.sum_y: V | None = sum_y
        self.total_y = total_y
        self._average_x(scratch, (), self.total_x)
        self.reward_x = -loss(scratch)
        self._average_y(scratch, (), total_y)
        self.reward_y = -loss(scratch)
        self.evaluations = 2
        self.chosen: list[int] = []

    def _average_x(self, out: V, extra: Sequence[tuple[V, float]], total: float) -> None:
        """X's average with ``extra`` peers (models and weights) added, into ``out``."""
        plus = [*self.resident_x, *extra]
        if self.base_x is None:
            base, scale = self.own_model, self.own_weight
            average_into(out, base, total, base_scale=scale, plus=plus)
        else:
            average_into(out, self.base_x, total, plus=plus)

    def _average_y(self, out: V, removed: Sequence[tuple[V, float]], total: float) -> None:
        """Y's average with ``removed`` peers taken out, into ``out``."""
        assert self.sum_y is not None  # dropped only once the search is over
        average_into(out, self.sum_y, total, minus=removed)

    def visit(
        self,
        batch: Sequence[int],
        models: Mapping[int, V],
        weights: Mapping[int, float],
        rng: np.random.Generator,
        budget: int | None,
    ) -> bool:
        """Decide on each peer of ``batch`` in order; True once the budget is reached. A peer
        missing from ``models`` vanished or sent a bad model: it is skipped this round."""
        present = [j for j in batch if j in models]
        for j in present:
            assert self.sum_y is not None  # dropped only once the search is over
            require_same_device(self.sum_y, models[j], f"weighing peer {j}'s model")
        step = 0
        while step < len(present):
            j = present[step]
            if self.lookahead is not None and step + 1 < len(present):
                k = present[step + 1]
                done = self._decide_pair(
                    (j, models[j], weights[j]), (k, models[k], weights[k]), rng, budget
                )
                step += 2
            else:
                done = self._decide(
                    j, models[j], weights[j], self._rewards(models[j], weights[j]), rng, budget
                )
                step += 1
            if done:
                return True
        return False

    def _rewards(self, w_j: V, p_j: float) -> tuple[float, float]:
        """R(X ∪ j) and R(Y ∖ j), one evaluation each."""
        self._average_x(self.scratch, [(w_j, p_j)], self.total_x + p_j)
        reward_x_add = -self.loss(self.scratch)
        self._average_y(self.scratch, [(w_j, p_j)], self.total_y - p_j)
        reward_y_remove = -self.loss(self.scratch)
        self.evaluations += 2
        return reward_x_add, reward_y_remove

    def _decide_pair(
        self,
        first: tuple[int, V, float],
        second: tuple[int, V, float],
        rng: np.random.Generator,
        budget: int | None,
    ) -> bool:
        """Decide on two peers from six rewards read at once (``LOOKAHEAD_ROWS``)."""
        assert self.lookahead is not None
        j, w_j, p_j = first
        k, w_k, p_k = second
        rows, total_x, total_y = self.lookahead.rows, self.total_x, self.total_y
        self._average_x(rows[0], [(w_j, p_j)], total_x + p_j)
        self._average_y(rows[1], [(w_j, p_j)], total_y - p_j)
        self._average_x(rows[2], [(w_j, p_j), (w_k, p_k)], total_x + p_j + p_k)
        self._average_y(rows[3], [(w_k, p_k)], total_y - p_k)
        self._average_x(rows[4], [(w_k, p_k)], total_x + p_k)
        self._average_y(rows[5], [(w_j, p_j), (w_k, p_k)], total_y - p_j - p_k)
        loss = self.lookahead.losses(LOOKAHEAD_ROWS)
        self.evaluations += LOOKAHEAD_ROWS
        chosen_before = len(self.chosen)
        if self._decide(j, w_j, p_j, (-loss[0], -loss[1]), rng, budget):
            return True
        added = len(self.chosen) > chosen_before
        after = (-loss[2], -loss[3]) if added else (-loss[4], -loss[5])
        return self._decide(k, w_k, p_k, after, rng, budget)

    def _decide(
        self,
        j: int,
        w_j: V,
        p_j: float,
        rewards: tuple[float, float],
        rng: np.random.Generator,
        budget: int | None,
    ) -> bool:
        """GGC's draw for peer ``j`` given R(X ∪ j) and R(Y ∖ j); True once the budget is
        reached."""
        reward_x_add, reward_y_remove = rewards
        gain_add, gain_remove = reward_x_add - self.reward_x, reward_y_remove - self.reward_y
        if rng.random() < add_probability(gain_add, gain_remove, self.tie):
            self.resident_x.append((w_j, p_j))
            self.total_x, self.reward_x = self.total_x + p_j, reward_x_add
            self.chosen.append(j)
            if self.fold_each:
                self.fold()
        else:
            assert self.sum_y is not None  # dropped only once the search is over
            add_scaled(self.sum_y, w_j, p_j, subtract=True)
            self.total_y, self.reward_y = self.total_y - p_j, reward_y_remove
        return _budget_reached(len(self.chosen), budget)

    def fold(self) -> None:
        """Add the resident chosen peers into X's running sum, before their batch is dropped."""
        if not self.resident_x:
            return
        base = self.own_model * self.own_weight if self.base_x is None else self.base_x
        for vector, scale in self.resident_x:
            add_scaled(base, vector, scale)
        self.base_x, self.resident_x = base, []

    def selection(self, batches_loaded: int) -> Selection[V]:
        """The outcome, while the last batch is resident; Y's sum is dropped first, so that
        X's average takes its place rather than a model more."""
        self.sum_y = None
        self.fold()
        aggregate = self.own_model * self.own_weight if self.base_x is None else self.base_x
        self.base_x = None
        divide(aggregate, self.total_x)
        return Selection(self.chosen, aggregate, self.evaluations, batches_loaded)
