"""FedAvg and FedProx, each optionally followed by local fine-tuning (+FT)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from collabfl.strategies.protocol import ClientPool, Verb, broadcast
from collabfl.strategies.rounds import RoundOutcome, average_replies, merge_metrics


@dataclass(frozen=True)
class FedAvg:
    """One global model averaged by sample count every round.

    ``prox_mu > 0`` turns it into FedProx (a proximal term towards the received global model
    during local training). ``finetune_epochs > 0`` adds a final round in which every client
    fine-tunes its best-validation global model locally (FedAvg+FT of the DPFL paper).
    """

    epochs: float
    prox_mu: float = 0.0
    finetune_epochs: float = 0.0
    name: str = "fedavg"

    def rounds(self, pool: ClientPool, num_rounds: int) -> Iterator[RoundOutcome]:
        global_model = None  # round 0 starts from the shared initial model on every client
        train_config = {
            "slot": "global",
            "epochs": self.epochs,
            "prox_mu": self.prox_mu,
            "upload": True,
        }
        for t in range(num_rounds):
            trained = broadcast(pool, Verb.TRAIN, t, train_config, model=global_model)
            global_model = average_replies(trained, pool.sample_counts)
            evaluate = {"slot": "global", "keep_best": self.finetune_epochs > 0}
            evaluated = broadcast(pool, Verb.EVALUATE, t, evaluate, model=global_model)
            yield RoundOutcome(t, merge_metrics(trained, evaluated))
        if self.finetune_epochs > 0:
            t = num_rounds
            finetune = {"slot": "finetuned", "from_best": "global", "epochs": self.finetune_epochs}
            trained = broadcast(pool, Verb.TRAIN, t, finetune)
            evaluated = broadcast(pool, Verb.EVALUATE, t, {"slot": "finetuned"})
            yield RoundOutcome(t, merge_metrics(trained, evaluated))
