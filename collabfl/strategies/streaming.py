"""Weighted averages over peer models that arrive in batches of bounded size.

The running sum is updated in place (strategies.inplace): one batch of peer models and the
sum are all an average holds, (batch + 1) models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

from collabfl.kernel.devices import require_same_device
from collabfl.strategies.inplace import V, add_scaled, divide

BatchLoader = Callable[[Sequence[int]], AbstractContextManager[Mapping[int, V]]]
"""Makes the models of the given peers resident for the duration of a ``with`` block.
Peers that could not be fetched are left out of the mapping."""


def batches(ids: Sequence[int], size: int | None) -> Iterator[Sequence[int]]:
    """Consecutive slices of ``ids`` of at most ``size`` (None: one slice)."""
    step = len(ids) if size is None else size
    for start in range(0, len(ids), max(step, 1)):
        yield ids[start : start + step]


def add_models(
    running_sum: V, total: float, models: Mapping[int, V], weights: Mapping[int, float]
) -> tuple[V, float]:
    """Add the weighted models of one resident batch to a running sum (in place) and its
    weight.

    ValueError naming both devices when a model is not on the running sum's device.
    """
    for j, model in models.items():
        require_same_device(running_sum, model, f"adding peer {j}'s model")
        add_scaled(running_sum, model, weights[j])
        total += weights[j]
    return running_sum, total


def streaming_average(
    own_model: V,
    own_weight: float,
    peers: Sequence[int],
    weights: Mapping[int, float],
    load: BatchLoader[V],
    batch_size: int | None,
) -> tuple[V, list[int]]:
    """avg({own} ∪ peers) holding at most ``batch_size`` peer models at once.

    Returns the average and the peers that actually contributed (fetch failures are skipped).
    """
    running_sum, total = own_model * own_weight, own_weight
    used: list[int] = []
    for batch in batches(list(peers), batch_size):
        with load(batch) as models:
            running_sum, total = add_models(running_sum, total, models, weights)
            used.extend(j for j in batch if j in models)
    divide(running_sum, total)
    return running_sum, used
