"""Collaboration equilibrium's round protocol: find stable coalitions, then train inside them.

Round 0 opens with the equilibrium search (strategies.equilibrium): on the clients not yet in a
stable coalition, every client's optimal collaborator set (OCS) is estimated and the
coordinator peels off the benefit graph's stable components, until nobody is left. Two OCS
estimators:

- greedy (default): every client first trains a warm-up model alone for ``init_epochs`` and
  publishes it; each OCS is then DPFL's validation-loss greedy search (GGC) restricted to the
  remaining clients, run by each client over its peers' published warm-up models, so the
  coordinator only sees indices. Cheap enough for many clients.
- SPO (``spo`` set): the paper's estimator. The coordinator learns the remaining clients'
  Pareto front with a hypernetwork and searches it for each client, asking the clients only
  for losses and gradients (strategies.spo_federated). No warm-up is needed.

The coalitions then train with the base method exactly as FedCollab's do
(strategies.coalitions). A client that appears after round 0 trains alone: an equilibrium is
defined for a fixed set of clients, and re-running the search would move clients who are
already stable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from collabfl.strategies.coalitions import CoalitionTrainer, MethodFactory, merged_outcome
from collabfl.strategies.equilibrium import OcsEstimator, OcsMap, collaboration_equilibrium
from collabfl.strategies.protocol import ClientPool, Instruction, broadcast
from collabfl.strategies.rounds import Resume, RoundOutcome, chosen_peers, first_round
from collabfl.strategies.spo_federated import FederatedSpo, SpoSearch
from collabfl.strategies.verbs import Collaborate, Train

WARMUP_SLOT = "warmup"
"""The slot of the models the OCS search compares (kept apart from the coalition models)."""


@dataclass(frozen=True)
class CollaborationEquilibrium:
    """``budget``: peer models a client may hold at once during the greedy OCS search (None:
    all); ``spo``: estimate the OCSs with SPO instead (then ``init_epochs`` and ``budget`` are
    unused)."""

    base: MethodFactory
    single: MethodFactory
    init_epochs: float
    budget: int | None = None
    spo: SpoSearch | None = None
    name: str = "equilibrium"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        trainer = CoalitionTrainer(pool, self.base, self.single, num_rounds)
        if resume is None:
            if num_rounds < 1:
                return
            search = self.search(pool)
            for coalition in search["coalitions"]:
                trainer.add(coalition)
        else:
            search = resume.checkpoint["search"]
            trainer.restore(resume)
        t = first_round(resume)
        while True:
            placed = {k for c in trainer.coalitions for k in c}
            if t < num_rounds:
                for k in sorted(set(pool.sample_counts) - placed):
                    trainer.add([k], Resume(t - 1, {}) if t > 0 else None)
            step = trainer.step()
            if step is None:
                return
            outcomes, members = step
            checkpoint = {
                "coalitions": trainer.coalitions,
                "states": trainer.checkpoints(outcomes),
                "search": search,
            }
            outcome = merged_outcome(
                outcomes, members, trainer.coalitions, pool.sample_counts, checkpoint
            )
            t = outcome.round + 1
            yield outcome

    def search(self, pool: ClientPool) -> dict[str, Any]:
        """The equilibrium over estimated OCSs (all at round 0).

        Returns the coalitions, per iteration every remaining client's OCS, and the clients
        the estimator had to leave alone because they failed it, with the reasons
        (JSON-ready).
        """
        failed: list[int] = []
        problems: list[str] = []
        spo: FederatedSpo | None = None
        estimator: OcsEstimator
        if self.spo is None:
            warmup = Train(self.init_epochs, slot=WARMUP_SLOT, publish=True)
            clients = sorted(broadcast(pool, 0, warmup))
            failed = sorted(set(pool.sample_counts) - set(clients))
            problems = [f"client {k} did not train its warm-up model" for k in failed]
            estimator = self._greedy_estimator(pool)
        else:
            clients = sorted(pool.sample_counts)
            estimator = spo = self.spo.estimator(pool)
        iterations: list[dict[str, list[int]]] = []

        def estimate(remaining: frozenset[int]) -> OcsMap:
            ocs = estimator(remaining)
            iterations.append({str(k): sorted(s) for k, s in ocs.items()})
            return ocs

        coalitions = collaboration_equilibrium(clients, estimate)
        if spo is not None:
            failed, problems = sorted(spo.failed), spo.problems
        return {
            "coalitions": [sorted(c) for c in coalitions],
            "iterations": iterations,
            "failed": failed,
            "problems": problems,
        }

    def _greedy_estimator(self, pool: ClientPool) -> OcsEstimator:
        searches = 0

        def estimate(remaining: frozenset[int]) -> OcsMap:
            nonlocal searches
            searches += 1
            return self._ocs(pool, remaining, searches - 1)

        return estimate

    def _ocs(self, pool: ClientPool, remaining: frozenset[int], iteration: int) -> OcsMap:
        """Each remaining client's OCS among the remaining clients, by its own GGC search.

        A client that does not answer keeps no collaborator (it can be stable only alone).
        """
        counts = pool.sample_counts
        instructions = {}
        for k in sorted(remaining):
            peers = [j for j in sorted(remaining) if j != k]
            search = Collaborate.weighted_by_samples(
                "greedy", peers, counts, self.budget, slot=WARMUP_SLOT, assign=False, step=iteration
            )
            instructions[k] = Instruction(0, search)
        chosen = chosen_peers(pool.send(instructions))
        return {k: frozenset({k, *chosen.get(k, [])}) for k in sorted(remaining)}
