"""Ditto: a personal model regularised towards the FedAvg global model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from collabfl.strategies.protocol import ClientPool, Verb, broadcast
from collabfl.strategies.rounds import (
    Resume,
    RoundOutcome,
    average_replies,
    first_round,
    merge_metrics,
)


@dataclass(frozen=True)
class Ditto:
    """Each round a client trains the global model (uploaded and averaged as in FedAvg) and
    its personal model with the proximal term (lam/2)·‖v − w‖² towards the global model it
    received. The personal model is the one evaluated."""

    epochs: float
    lam: float = 0.75
    name: str = "ditto"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        global_model = None if resume is None else resume.checkpoint.get("global")
        for t in range(first_round(resume), num_rounds):
            personal = {
                "slot": "personal",
                "model_into": "global",
                "epochs": self.epochs,
                "prox_mu": self.lam,
                "prox_slot": "global",
            }
            trained_personal = broadcast(pool, Verb.TRAIN, t, personal, model=global_model)
            shared = {"slot": "global", "epochs": self.epochs, "upload": True}
            trained_global = broadcast(pool, Verb.TRAIN, t, shared)
            global_model = average_replies(trained_global, pool.sample_counts)
            evaluated = broadcast(pool, Verb.EVALUATE, t, {"slot": "personal"})
            metrics = merge_metrics(trained_global, trained_personal, evaluated)
            yield RoundOutcome(t, metrics, None, {"global": global_model})
