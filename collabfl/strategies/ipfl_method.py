"""iPFL's round protocol: a model-sharing market run by the coordinator.

Every round each client trains its own model (with the proximal term towards its centre
from the previous round; plain local training in round 0) and uploads it. The coordinator
prices imports from the model distances and the clients' reported profiles, builds the
import graph A, settles payments, computes each client's utility, and sends every importer
its proximal centre θ̄_i for the next round (strategies/ipfl.py has the math, in NumPy:
uploads become arrays and centres flat vectors at this module's boundary). The ledger (gain,
sharing cost, payment, utility and what was paid to whom) is part of each client's round
metrics, so the run directory and the coordinator service keep it round by round.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from collabfl.kernel.graph_edges import Edge
from collabfl.strategies.attacks import Attackers
from collabfl.strategies.ipfl import (
    ClientProfile,
    cosine_distance_grad,
    cosine_distance_matrix,
    gain,
    market_graph,
    payments,
    proximal_centers,
    squared_l2_distance_matrix,
    squared_l2_grad,
    utilities,
)
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import ClientPool, FlatVector, Instruction, as_array, as_vector
from collabfl.strategies.rounds import Resume, RoundOutcome, first_round, merge_metrics
from collabfl.strategies.verbs import Evaluate, Train

Distance = Literal["cosine", "l2"]


@dataclass(frozen=True)
class IPFL:
    """iPFL with distance weight ``lam`` (λ) and proximal step ``eta`` (η); the clients'
    proximal weight is λ/η. ``profiles`` are what each client reported (cost, eagerness;
    n is its sample count). ``attackers`` upload poisoned (e.g. random) weights."""

    epochs: float
    initial_model: npt.NDArray[np.floating]
    profiles: Mapping[int, ClientProfile]
    lam: float = 0.1
    eta: float = 1.0
    distance: Distance = "cosine"
    attackers: Attackers = field(default_factory=Attackers)
    name: str = "ipfl"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        centres: dict[int, FlatVector] = {}
        if resume is not None:
            centres = {
                int(key.removeprefix("centre_")): as_vector(value)
                for key, value in resume.checkpoint.items()
            }
        for t in range(first_round(resume), num_rounds):
            trained = pool.send(
                {
                    k: Instruction(t, self._train_task(k, k in centres), centres.get(k))
                    for k in sorted(pool.sample_counts)
                    if k in self.profiles
                }
            )
            uploads = {k: r.model for k, r in sorted(trained.items()) if r.model is not None}
            if not uploads:
                raise RuntimeError(f"round {t}: no client uploaded a model")
            traders = list(uploads)
            graph, ledger, new_centres = self._market(uploads)
            evaluated = pool.send({k: Instruction(t, Evaluate()) for k in traders})
            centres = {k: as_vector(new_centres[i]) for i, k in enumerate(traders)}
            metrics = merge_metrics(trained, evaluated)
            for k in metrics.keys() & ledger.keys():
                metrics[k] = metrics[k].merged(ledger[k])
            self.attackers.mark(metrics)
            edges: list[Edge] = [
                (traders[i], traders[j], 1.0) for i, j in zip(*np.nonzero(graph), strict=True)
            ]
            yield RoundOutcome(t, metrics, edges, {f"centre_{k}": v for k, v in centres.items()})

    def _train_task(self, client: int, has_centre: bool) -> Train:
        task = Train(self.epochs, upload=True)
        if has_centre:
            task = replace(
                task, model_into="centre", prox_slot="centre", prox_mu=self.lam / self.eta
            )
        return self.attackers.train(client, task)

    def _market(
        self, uploads: Mapping[int, FlatVector]
    ) -> tuple[npt.NDArray[np.float64], dict[int, ClientMetrics], npt.NDArray[np.float64]]:
        """The import graph, each trader's ledger entry, and the new proximal centres (rows
        in ``uploads`` order)."""
        traders = list(uploads)
        models = np.stack([as_array(model) for model in uploads.values()])
        origin = np.asarray(self.initial_model, dtype=np.float64)
        if self.distance == "cosine":
            distances, grad = cosine_distance_matrix(models - origin), cosine_distance_grad
        else:
            distances, grad = squared_l2_distance_matrix(models), squared_l2_grad
        profiles = [self.profiles[k] for k in traders]
        graph = market_graph(profiles, distances, self.lam)
        remittances, pay = payments(graph, profiles, distances, self.lam)
        utility = utilities(graph, profiles, distances, self.lam)
        n = np.array([p.n for p in profiles], dtype=np.float64)
        importers = graph.sum(axis=0)
        ledger = {}
        for i, k in enumerate(traders):
            bought = float(graph[i] @ n)
            sharing = profiles[i].cost * importers[i] if importers[i] else 0.0
            imports = np.flatnonzero(graph[i])
            ledger[k] = ClientMetrics(
                gain=float(gain(profiles[i], bought)),
                sharing_cost=float(sharing),
                payment=float(pay[i]),
                utility=float(utility[i]),
                importers=int(importers[i]),
                imports=tuple(traders[j] for j in imports),
                paid_to=tuple(float(remittances[i, j]) for j in imports),
            )
        origin_for_grad = origin if self.distance == "cosine" else None
        centres = proximal_centers(models, graph, n, self.eta, grad, origin_for_grad)
        return graph, ledger, centres
