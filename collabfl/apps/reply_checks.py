"""The coordinator's checks on what a participant reports in a reply, before any method
reads it.

Accuracies must lie in [0, 1] and losses be finite and >= 0; a model, discriminator or
gradient must be finite, within the magnitude limit that peers also apply to each other's
models (client/peer_limits.py), and as long as the model the step carried, where it carried
one; a COLLABORATE's ``chosen`` may name only peers the step offered. A reply that fails is
refused whole: the member is absent from that step, as if it had not answered, and the pool
records an ``anomaly`` naming it and the value. Values inside their domain still steer
decisions; docs/security.md says what a liar gains from them.
"""

from __future__ import annotations

import math

import torch

from collabfl.client.peer_limits import MAX_PEER_WEIGHT
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Collaborate

ACCURACIES = (
    "val_acc",
    "test_acc",
    "best_val_acc",
    "best_test_acc",
    "local_val_acc",
    "local_test_acc",
    "disc_acc",
)
LOSSES = ("train_loss", "val_loss", "test_loss", "loss")


def refusal(reply: Reply, step: Instruction, max_weight: float = MAX_PEER_WEIGHT) -> str | None:
    """Why ``reply`` (to ``step``) is refused, or None when every value is in its domain."""
    return (
        _metrics_refusal(reply.metrics)
        or _chosen_refusal(reply.metrics, step)
        or _vector_refusal(reply.model, step, max_weight)
    )


def _metrics_refusal(metrics: ClientMetrics) -> str | None:
    for name in ACCURACIES:
        for value in _values(getattr(metrics, name)):
            if not 0.0 <= value <= 1.0:
                return f"refused {name} {value:g}: an accuracy lies in [0, 1]"
    for name in LOSSES:
        for value in _values(getattr(metrics, name)):
            if not (math.isfinite(value) and value >= 0.0):
                return f"refused {name} {value:g}: a loss is finite and >= 0"
    return None


def _chosen_refusal(metrics: ClientMetrics, step: Instruction) -> str | None:
    """A COLLABORATE's ``chosen`` names whom the client will be offered (and granted) next
    in DPFL: only peers the step offered."""
    if metrics.chosen is None:
        return None
    offered = step.task.candidates if isinstance(step.task, Collaborate) else ()
    strangers = sorted(set(metrics.chosen) - set(offered))
    if strangers:
        return f"refused chosen peers {strangers}: the step did not offer them"
    return None


def _values(value: float | tuple[float, ...] | None) -> tuple[float, ...]:
    if value is None:
        return ()
    return value if isinstance(value, tuple) else (value,)


def _vector_refusal(model: torch.Tensor | None, step: Instruction, limit: float) -> str | None:
    if model is None:
        return None
    if step.model is not None and model.numel() != step.model.numel():
        return f"refused a vector of {model.numel()} values, the step carried {step.model.numel()}"
    if not bool(torch.isfinite(model).all()):
        return "refused a vector that is not finite (NaN or Inf)"
    largest = float(model.abs().max()) if model.numel() else 0.0
    if largest > limit:
        return f"refused a vector of magnitude {largest:.3g}, above the limit of {limit:g}"
    return None
