"""FedAvg and FedProx, each optionally followed by local fine-tuning (+FT)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from collabfl.strategies.attacks import Attackers
from collabfl.strategies.protocol import ClientPool, FlatVector, Instruction, broadcast
from collabfl.strategies.robust import Aggregation
from collabfl.strategies.rounds import (
    Resume,
    RoundOutcome,
    first_round,
    merge_metrics,
)
from collabfl.strategies.verbs import Evaluate, Train


@dataclass(frozen=True)
class FedAvg:
    """One global model averaged by sample count every round (or by a robust rule).

    ``prox_mu > 0`` turns it into FedProx (a proximal term towards the received global model
    during local training). ``finetune_epochs > 0`` adds a final round in which every client
    fine-tunes its best-validation global model locally (FedAvg+FT of the DPFL paper).
    ``attackers`` upload poisoned models (robustness experiments).
    """

    epochs: float
    prox_mu: float = 0.0
    finetune_epochs: float = 0.0
    attackers: Attackers = field(default_factory=Attackers)
    aggregation: Aggregation = field(default_factory=Aggregation)
    """How uploads are combined (default: the sample-weighted mean)."""
    name: str = "fedavg"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        # Round 0 starts from the shared initial model on every client.
        global_model: FlatVector | None = None
        if resume is not None:
            global_model = resume.checkpoint.get("global")
        train = Train(self.epochs, slot="global", prox_mu=self.prox_mu, upload=True)
        evaluate = Evaluate(slot="global", keep_best=self.finetune_epochs > 0)
        for t in range(first_round(resume), num_rounds):
            trained = pool.send(
                {
                    k: Instruction(t, self.attackers.train(k, train), global_model)
                    for k in sorted(pool.sample_counts)
                }
            )
            global_model = self.aggregation.combine(trained, pool.sample_counts, global_model)
            evaluated = broadcast(pool, t, evaluate, model=global_model)
            metrics = merge_metrics(trained, evaluated)
            self.attackers.mark(metrics)
            yield RoundOutcome(t, metrics, None, {"global": global_model})
        if self.finetune_epochs > 0 and first_round(resume) <= num_rounds:
            t = num_rounds
            finetune = Train(self.finetune_epochs, slot="finetuned", from_best="global")
            trained = broadcast(pool, t, finetune)
            evaluated = broadcast(pool, t, Evaluate(slot="finetuned"))
            metrics = merge_metrics(trained, evaluated)
            self.attackers.mark(metrics)
            yield RoundOutcome(t, metrics)
