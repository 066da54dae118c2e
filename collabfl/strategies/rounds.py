"""What every method yields per round, and the helpers their round protocols share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from collabfl.kernel.graph_edges import Edge
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import ClientPool, FlatVector, Reply


@dataclass(frozen=True)
class RoundOutcome:
    """The result of one round as the runtime records it."""

    round: int
    metrics: dict[int, ClientMetrics]
    """Per client: its evaluation metrics merged with what its other replies reported."""
    graph: list[Edge] | None = None
    """The collaboration graph used this round, for methods that have one."""
    checkpoint: dict[str, Any] = field(default_factory=dict)
    """The method's coordinator-side state after this round: with it, ``rounds`` can
    continue at the next round after a restart (see ``Resume``)."""
    coalitions: list[list[int]] | None = None
    """Disjoint coalitions in force this round (FedCollab, collaboration equilibrium): sorted
    member lists, sorted by first member, covering every client that took part."""


@dataclass(frozen=True)
class Resume:
    """Continue a run after ``last_round`` from the checkpoint that round yielded."""

    last_round: int
    checkpoint: dict[str, Any]

    @property
    def next_round(self) -> int:
        return self.last_round + 1


def first_round(resume: Resume | None) -> int:
    return 0 if resume is None else resume.next_round


class Method(Protocol):
    """A federated method: a round protocol written against the ClientPool port."""

    @property
    def name(self) -> str:
        """The label its rounds are recorded under (``dpfl:budget=0.1``)."""
        ...

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        """Run the method (from ``resume`` if given), yielding after every round."""
        ...


def merge_metrics(*replies: Mapping[int, Reply]) -> dict[int, ClientMetrics]:
    """Merge several replies per client into one metrics record (later replies win for the
    fields they set).

    Only clients present in the last mapping (usually the evaluation) are kept: a client that
    vanished mid-round has no result for it.
    """
    if not replies:
        return {}
    merged = {k: ClientMetrics() for k in replies[-1]}
    for reply_set in replies:
        for k, reply in reply_set.items():
            if k in merged:
                merged[k] = merged[k].merged(reply.metrics)
    return merged


def chosen_peers(collaborated: Mapping[int, Reply]) -> dict[int, list[int]]:
    """The collaborators each client reported choosing in a COLLABORATE (none if it reported
    nothing)."""
    return {k: list(reply.metrics.chosen or ()) for k, reply in collaborated.items()}


def weighted_average(models: Sequence[FlatVector], weights: Sequence[float]) -> FlatVector:
    """Σ w_i m_i / Σ w_i over flat weight vectors."""
    if not models:
        raise ValueError("cannot average an empty set of models")
    if len(models) != len(weights):
        raise ValueError(f"{len(models)} models but {len(weights)} weights")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError(f"aggregation weights must sum to a positive value, got {total}")
    result = models[0] * (weights[0] / total)
    for model, weight in zip(models[1:], weights[1:], strict=True):
        result = result + model * (weight / total)
    return result


def average_replies(replies: Mapping[int, Reply], sample_counts: Mapping[int, int]) -> FlatVector:
    """FedAvg aggregation of the uploaded models, weighted by sample counts."""
    uploaded = {k: model for k in sorted(replies) if (model := replies[k].model) is not None}
    if not uploaded:
        raise RuntimeError("no client uploaded a model this round; the federation is empty")
    return weighted_average(list(uploaded.values()), [sample_counts[k] for k in uploaded])
