"""Ditto: a personal model regularised towards the FedAvg global model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from collabfl.strategies.protocol import ClientPool, FlatVector, broadcast
from collabfl.strategies.robust import Aggregation
from collabfl.strategies.rounds import (
    Resume,
    RoundOutcome,
    first_round,
    merge_metrics,
)
from collabfl.strategies.verbs import Evaluate, Train


@dataclass(frozen=True)
class Ditto:
    """Each round a client trains the global model (uploaded and averaged as in FedAvg) and
    its personal model with the proximal term (lam/2)·‖v − w‖² towards the global model it
    received. The personal model is the one evaluated."""

    epochs: float
    lam: float = 0.75
    aggregation: Aggregation = field(default_factory=Aggregation)
    """How the global uploads are combined (default: the sample-weighted mean)."""
    name: str = "ditto"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        global_model: FlatVector | None = None
        if resume is not None:
            global_model = resume.checkpoint.get("global")
        personal = Train(
            self.epochs, slot="personal", model_into="global", prox_mu=self.lam, prox_slot="global"
        )
        shared = Train(self.epochs, slot="global", upload=True)
        for t in range(first_round(resume), num_rounds):
            trained_personal = broadcast(pool, t, personal, model=global_model)
            trained_global = broadcast(pool, t, shared)
            sent, counts = global_model, pool.sample_counts
            global_model = self.aggregation.combine(trained_global, counts, sent)
            evaluated = broadcast(pool, t, Evaluate(slot="personal"))
            metrics = merge_metrics(trained_global, trained_personal, evaluated)
            yield RoundOutcome(t, metrics, None, {"global": global_model})
