"""pFedGraph's round protocol: the coordinator infers a weighted collaboration graph.

Each round every client trains from its personalised aggregate (with the paper's
regulariser towards the graph-weighted direction of its neighbours, none in round 0) and
uploads its model; the coordinator compares the clients' updates, solves each client's
small QP for its row of W (strategies/pfedgraph.py) and sends client i its aggregate
θ̃_i = Σ_j W_ij θ_j, which is also the model evaluated. The math runs in NumPy: uploads
become arrays and aggregates become flat vectors at this module's boundary.

``aggregation`` (strategies/robust.py) makes the coordinator robust to a crafted upload:
``clip_norm`` clips each upload's update from the aggregate the client was sent last round
(the uploads' coordinate-wise median where none is known) before the graph is inferred, and
``median`` or ``trimmed_mean`` replace the W-weighted sum with the W-weighted
coordinate-wise median or trimmed mean. The regulariser's pull (``normalized``) averages
unit vectors, which no scaling moves further than its weight.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from collabfl.kernel.graph_edges import Edge
from collabfl.strategies.attacks import Attackers
from collabfl.strategies.pfedgraph import (
    collaboration_graph,
    model_similarity,
    normalized_aggregate,
    personalized_aggregates,
)
from collabfl.strategies.protocol import (
    ClientPool,
    FlatVector,
    Instruction,
    as_array,
    as_vector,
)
from collabfl.strategies.robust import Aggregation, clipped_update, graph_aggregates
from collabfl.strategies.rounds import Resume, RoundOutcome, first_round, merge_metrics
from collabfl.strategies.verbs import AlignMode, Evaluate, Train

Matrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PFedGraph:
    """pFedGraph with the paper's α (see strategies/pfedgraph.py for the two conventions).

    ``regularizer="normalized"`` is the paper's −(λ/2)⟨θ/‖θ‖, θ̄_i⟩ with
    θ̄_i = Σ_j W_ij θ_j/‖θ_j‖; ``"cosine"`` is the cheaper −(λ/2)·cos(θ, θ̃_i).
    ``compare`` is the [start, stop) range of the flat vector whose updates are compared
    (all parameters, or only the final layers). ``attackers`` upload poisoned weights.
    ``score_local``: the post-training model also competes for the reported best-validation
    model, beside the received aggregate (the official code evaluates both).
    ``local_steps`` > 0: that many SGD steps per round instead of ``epochs`` (the official
    code runs 200). ``aggregation``: the rule and clipping of the aggregates (module doc).
    """

    epochs: float
    initial_model: npt.NDArray[np.floating]
    alpha: float
    lam: float = 0.01
    regularizer: AlignMode = "normalized"
    compare: tuple[int, int] | None = None
    attackers: Attackers = field(default_factory=Attackers)
    score_local: bool = False
    local_steps: int = 0
    aggregation: Aggregation = field(default_factory=Aggregation)
    name: str = "pfedgraph"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        references: dict[int, FlatVector] = {}
        sent: dict[int, FlatVector] = {}  # with clip_norm: last round's aggregate per client
        if resume is not None:
            references = {
                int(key.removeprefix("reference_")): as_vector(value)
                for key, value in resume.checkpoint.items()
            }
        for t in range(first_round(resume), num_rounds):
            trained = pool.send(
                {
                    k: Instruction(t, self._train_task(k, t), references.get(k))
                    for k in sorted(pool.sample_counts)
                }
            )
            uploads = {k: r.model for k, r in sorted(trained.items()) if r.model is not None}
            if not uploads:
                raise RuntimeError(f"round {t}: no client uploaded a model")
            if (bound := self.aggregation.clip_norm) is not None:
                uploads = self._clipped(uploads, sent, bound)
            uploaded = list(uploads)
            weights, aggregates, pulls = self._graph(uploads, pool.sample_counts)
            evaluated = pool.send(
                {
                    k: Instruction(t, Evaluate(), as_vector(aggregates[i]))
                    for i, k in enumerate(uploaded)
                }
            )
            references = {k: as_vector(pulls[i]) for i, k in enumerate(uploaded)}
            if bound is not None:
                sent = {k: as_vector(aggregates[i]) for i, k in enumerate(uploaded)}
            metrics = merge_metrics(trained, evaluated)
            self.attackers.mark(metrics)
            yield RoundOutcome(
                t,
                metrics,
                _edges(uploaded, weights),
                {f"reference_{k}": v for k, v in references.items()},
            )

    def _train_task(self, client: int, t: int) -> Train:
        task = Train(
            self.epochs,
            upload=True,
            model_into="reference",
            align_slot="reference",
            align_lam=self.lam if t > 0 else 0.0,
            align_mode=self.regularizer,
            score_local=self.score_local,
            steps=self.local_steps,
        )
        return self.attackers.train(client, task)

    @staticmethod
    def _clipped(
        uploads: Mapping[int, FlatVector], sent: Mapping[int, FlatVector], bound: float
    ) -> dict[int, FlatVector]:
        """Each upload with its update clipped to ``bound``: from the aggregate the client
        was sent, or, where none is known (round 0, a resumed run, a newcomer), from the
        coordinate-wise median of the uploads."""
        median = torch.stack(list(uploads.values())).median(dim=0).values
        return {k: clipped_update(m, sent.get(k, median), bound) for k, m in uploads.items()}

    def _graph(
        self, uploads: Mapping[int, FlatVector], counts: Mapping[int, int]
    ) -> tuple[Matrix, Matrix, Matrix]:
        """W, the aggregates θ̃ and what each client's regulariser pulls towards (rows in
        ``uploads`` order)."""
        models = np.stack([as_array(model) for model in uploads.values()])
        start, stop = self.compare or (0, models.shape[1])
        updates = models[:, start:stop] - np.asarray(self.initial_model)[start:stop]
        prior = np.array([counts[k] for k in uploads], dtype=np.float64)
        weights = collaboration_graph(model_similarity(updates), prior / prior.sum(), self.alpha)
        if self.aggregation.rule == "mean":
            aggregates = personalized_aggregates(weights, models)
        else:
            aggregates = graph_aggregates(
                weights, models, self.aggregation.rule, self.aggregation.trim
            )
        pulls = (
            aggregates if self.regularizer == "cosine" else normalized_aggregate(weights, models)
        )
        return weights, aggregates, pulls


def _edges(clients: list[int], weights: Matrix) -> list[Edge]:
    return [
        (clients[i], clients[j], float(weights[i, j]))
        for i in range(len(clients))
        for j in range(len(clients))
        if i != j and weights[i, j] > 1e-12
    ]
