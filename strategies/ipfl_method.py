"""iPFL's round protocol: a model-sharing market run by the coordinator.

Every round each client trains its own model (with the proximal term towards its centre
from the previous round; plain local training in round 0) and uploads it. The coordinator
prices imports from the model distances and the clients' reported profiles, builds the
import graph A, settles payments, computes each client's utility, and sends every importer
its proximal centre θ̄_i for the next round (strategies/ipfl.py has the math). The ledger
(gain, sharing cost, payment, utility and what was paid to whom) is part of each client's
round metrics, so the run directory and the coordinator service keep it round by round.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

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
from collabfl.strategies.protocol import ClientPool, Instruction, Reply, Verb
from collabfl.strategies.rounds import Edge, Resume, RoundOutcome, first_round, merge_metrics

Distance = Literal["cosine", "l2"]


@dataclass(frozen=True)
class IPFL:
    """iPFL with distance weight ``lam`` (λ) and proximal step ``eta`` (η); the clients'
    proximal weight is λ/η. ``profiles`` are what each client reported (cost, eagerness;
    n is its sample count). ``attackers`` upload poisoned (e.g. random) weights."""

    epochs: float
    initial_model: np.ndarray
    profiles: Mapping[int, ClientProfile]
    lam: float = 0.1
    eta: float = 1.0
    distance: Distance = "cosine"
    attackers: Attackers = field(default_factory=Attackers)
    name: str = "ipfl"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        centres: dict[int, np.ndarray] = {}
        if resume is not None:
            centres = {
                int(key.removeprefix("centre_")): np.asarray(value)
                for key, value in resume.checkpoint.items()
            }
        for t in range(first_round(resume), num_rounds):
            trained = pool.send(
                {
                    k: Instruction(
                        Verb.TRAIN, t, self._train_config(k, k in centres), centres.get(k)
                    )
                    for k in sorted(pool.sample_counts)
                    if k in self.profiles
                }
            )
            traders = sorted(k for k, reply in trained.items() if reply.model is not None)
            if not traders:
                raise RuntimeError(f"round {t}: no client uploaded a model")
            graph, ledger, new_centres = self._market(traders, trained)
            evaluated = pool.send(
                {k: Instruction(Verb.EVALUATE, t, {"slot": "model"}) for k in traders}
            )
            centres = {k: new_centres[i] for i, k in enumerate(traders)}
            metrics = merge_metrics(trained, evaluated)
            for k in metrics:
                metrics[k].update(ledger.get(k, {}))
            self.attackers.mark(metrics)
            edges: list[Edge] = [
                (traders[i], traders[j], 1.0) for i, j in zip(*np.nonzero(graph), strict=True)
            ]
            yield RoundOutcome(t, metrics, edges, {f"centre_{k}": v for k, v in centres.items()})

    def _train_config(self, client: int, has_centre: bool) -> dict[str, Any]:
        config: dict[str, Any] = {"slot": "model", "epochs": self.epochs, "upload": True}
        if has_centre:
            config |= {
                "model_into": "centre",
                "prox_slot": "centre",
                "prox_mu": self.lam / self.eta,
            }
        return self.attackers.train_config(client, config)

    def _market(
        self, traders: list[int], trained: Mapping[int, Reply]
    ) -> tuple[np.ndarray, dict[int, dict[str, Any]], np.ndarray]:
        """The import graph, each trader's ledger entry, and the new proximal centres."""
        models = np.stack([np.asarray(trained[k].model, dtype=np.float64) for k in traders])
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
            ledger[k] = {
                "gain": float(gain(profiles[i], bought)),
                "sharing_cost": float(sharing),
                "payment": float(pay[i]),
                "utility": float(utility[i]),
                "importers": int(importers[i]),
                "imports": [traders[j] for j in np.flatnonzero(graph[i])],
                "paid_to": [float(remittances[i, j]) for j in np.flatnonzero(graph[i])],
            }
        origin_for_grad = origin if self.distance == "cosine" else None
        centres = proximal_centers(models, graph, n, self.eta, grad, origin_for_grad)
        return graph, ledger, centres.astype(np.float32)
