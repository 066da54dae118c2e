"""Ditto: a personal model regularised towards the FedAvg global model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from collabfl.strategies.protocol import ClientPool, Verb, broadcast
from collabfl.strategies.rounds import RoundOutcome, average_replies, merge_metrics


@dataclass(frozen=True)
class Ditto:
    """Each round a client trains the global model (uploaded and averaged as in FedAvg) and
    its personal model with the proximal term (lam/2)·‖v − w‖² towards the global model it
    received. The personal model is the one evaluated."""

    epochs: float
    lam: float = 0.75
    name: str = "ditto"

    def rounds(self, pool: ClientPool, num_rounds: int) -> Iterator[RoundOutcome]:
        global_model = None
        for t in range(num_rounds):
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
            yield RoundOutcome(t, merge_metrics(trained_global, trained_personal, evaluated))
