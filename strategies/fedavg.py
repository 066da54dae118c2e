"""FedAvg and FedProx, each optionally followed by local fine-tuning (+FT)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from collabfl.strategies.attacks import Attackers
from collabfl.strategies.protocol import ClientPool, Instruction, Verb, broadcast
from collabfl.strategies.rounds import (
    Resume,
    RoundOutcome,
    average_replies,
    first_round,
    merge_metrics,
)


@dataclass(frozen=True)
class FedAvg:
    """One global model averaged by sample count every round.

    ``prox_mu > 0`` turns it into FedProx (a proximal term towards the received global model
    during local training). ``finetune_epochs > 0`` adds a final round in which every client
    fine-tunes its best-validation global model locally (FedAvg+FT of the DPFL paper).
    ``attackers`` upload poisoned models (robustness experiments).
    """

    epochs: float
    prox_mu: float = 0.0
    finetune_epochs: float = 0.0
    attackers: Attackers = field(default_factory=Attackers)
    name: str = "fedavg"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        # Round 0 starts from the shared initial model on every client.
        global_model = None if resume is None else resume.checkpoint.get("global")
        train_config = {
            "slot": "global",
            "epochs": self.epochs,
            "prox_mu": self.prox_mu,
            "upload": True,
        }
        for t in range(first_round(resume), num_rounds):
            trained = pool.send(
                {
                    k: Instruction(
                        Verb.TRAIN, t, self.attackers.train_config(k, train_config), global_model
                    )
                    for k in sorted(pool.sample_counts)
                }
            )
            global_model = average_replies(trained, pool.sample_counts)
            evaluate = {"slot": "global", "keep_best": self.finetune_epochs > 0}
            evaluated = broadcast(pool, Verb.EVALUATE, t, evaluate, model=global_model)
            metrics = merge_metrics(trained, evaluated)
            self.attackers.mark(metrics)
            yield RoundOutcome(t, metrics, None, {"global": global_model})
        if self.finetune_epochs > 0 and first_round(resume) <= num_rounds:
            t = num_rounds
            finetune = {"slot": "finetuned", "from_best": "global", "epochs": self.finetune_epochs}
            trained = broadcast(pool, Verb.TRAIN, t, finetune)
            evaluated = broadcast(pool, Verb.EVALUATE, t, {"slot": "finetuned"})
            metrics = merge_metrics(trained, evaluated)
            self.attackers.mark(metrics)
            yield RoundOutcome(t, metrics)
