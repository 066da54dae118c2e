"""pFedGraph's round protocol: the coordinator infers a weighted collaboration graph.

Each round every client trains from its personalised aggregate (with the paper's
regulariser towards the graph-weighted direction of its neighbours, none in round 0) and
uploads its model; the coordinator compares the clients' updates, solves each client's
small QP for its row of W (strategies/pfedgraph.py) and sends client i its aggregate
θ̃_i = Σ_j W_ij θ_j, which is also the model evaluated. Vectors cross this module as NumPy
arrays; the runtimes turn them into tensors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from collabfl.strategies.attacks import Attackers
from collabfl.strategies.pfedgraph import (
    collaboration_graph,
    model_similarity,
    normalized_aggregate,
    personalized_aggregates,
)
from collabfl.strategies.protocol import ClientPool, Instruction, Reply, Verb
from collabfl.strategies.rounds import Edge, Resume, RoundOutcome, first_round, merge_metrics

Regularizer = Literal["normalized", "cosine"]


@dataclass(frozen=True)
class PFedGraph:
    """pFedGraph with the paper's α (see strategies/pfedgraph.py for the two conventions).

    ``regularizer="normalized"`` is the paper's −(λ/2)⟨θ/‖θ‖, θ̄_i⟩ with
    θ̄_i = Σ_j W_ij θ_j/‖θ_j‖; ``"cosine"`` is the cheaper −(λ/2)·cos(θ, θ̃_i).
    ``compare`` is the [start, stop) range of the flat vector whose updates are compared
    (all parameters, or only the final layers). ``attackers`` upload poisoned weights.
    """

    epochs: float
    initial_model: np.ndarray
    alpha: float
    lam: float = 0.01
    regularizer: Regularizer = "normalized"
    compare: tuple[int, int] | None = None
    attackers: Attackers = field(default_factory=Attackers)
    name: str = "pfedgraph"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        references: dict[int, np.ndarray] = {}
        if resume is not None:
            references = {
                int(key.removeprefix("reference_")): np.asarray(value)
                for key, value in resume.checkpoint.items()
            }
        for t in range(first_round(resume), num_rounds):
            trained = pool.send(
                {
                    k: Instruction(Verb.TRAIN, t, self._train_config(k, t), references.get(k))
                    for k in sorted(pool.sample_counts)
                }
            )
            uploaded = sorted(k for k, reply in trained.items() if reply.model is not None)
            if not uploaded:
                raise RuntimeError(f"round {t}: no client uploaded a model")
            weights, aggregates, pulls = self._graph(uploaded, trained, pool.sample_counts)
            evaluated = pool.send(
                {
                    k: Instruction(Verb.EVALUATE, t, {"slot": "model"}, aggregates[i])
                    for i, k in enumerate(uploaded)
                }
            )
            references = {k: pulls[i] for i, k in enumerate(uploaded)}
            metrics = merge_metrics(trained, evaluated)
            self.attackers.mark(metrics)
            yield RoundOutcome(
                t,
                metrics,
                _edges(uploaded, weights),
                {f"reference_{k}": v for k, v in references.items()},
            )

    def _train_config(self, client: int, t: int) -> dict[str, Any]:
        config: dict[str, Any] = {
            "slot": "model",
            "epochs": self.epochs,
            "upload": True,
            "model_into": "reference",
            "align_slot": "reference",
            "align_lam": self.lam if t > 0 else 0.0,
            "align_mode": self.regularizer,
        }
        return self.attackers.train_config(client, config)

    def _graph(
        self, uploaded: list[int], trained: Mapping[int, Reply], counts: Mapping[int, int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """W, the aggregates θ̃ and what each client's regulariser pulls towards."""
        models = np.stack([np.asarray(trained[k].model, dtype=np.float64) for k in uploaded])
        start, stop = self.compare or (0, models.shape[1])
        updates = models[:, start:stop] - np.asarray(self.initial_model)[start:stop]
        prior = np.array([counts[k] for k in uploaded], dtype=np.float64)
        weights = collaboration_graph(model_similarity(updates), prior / prior.sum(), self.alpha)
        aggregates = personalized_aggregates(weights, models)
        pulls = (
            aggregates if self.regularizer == "cosine" else normalized_aggregate(weights, models)
        )
        return weights, aggregates.astype(np.float32), pulls.astype(np.float32)


def _edges(clients: list[int], weights: np.ndarray) -> list[Edge]:
    return [
        (clients[i], clients[j], float(weights[i, j]))
        for i in range(len(clients))
        for j in range(len(clients))
        if i != j and weights[i, j] > 1e-12
    ]
