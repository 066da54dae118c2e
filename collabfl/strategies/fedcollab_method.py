"""FedCollab's round protocol: estimate distances, solve coalitions, train inside them.

Before round 0 every pair of clients trains a client discriminator (strategies.distances), the
coordinator turns the estimated distances and the sample counts into coalitions
(strategies.fedcollab), and from then on each coalition runs the base method on its own
(strategies.coalitions). A client that appears later (a late joiner in a real federation) has
its distances to everyone estimated at the start of the round it is first seen and joins the
coalition that minimises the objective, or stays alone when that is lower still.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from collabfl.strategies.coalitions import CoalitionTrainer, MethodFactory, merged_outcome
from collabfl.strategies.distances import (
    DistanceEstimate,
    DistanceSettings,
    all_pairs,
    estimate_distances,
    pairs_with,
)
from collabfl.strategies.fedcollab import coalitions_of, place_new_client, solve_coalitions
from collabfl.strategies.protocol import ClientPool
from collabfl.strategies.rounds import Resume, RoundOutcome, first_round


@dataclass(frozen=True)
class FedCollab:
    """``c`` is the objective's generalisation weight C (0: everyone alone; large: one
    coalition; the paper uses 8–10); ``restarts`` of the solver, seeded by ``seed``."""

    base: MethodFactory
    single: MethodFactory
    c: float
    distance: DistanceSettings
    restarts: int
    seed: int
    name: str = "fedcollab"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        trainer = CoalitionTrainer(pool, self.base, self.single, num_rounds)
        if resume is None:
            clients = sorted(pool.sample_counts)
            estimate = estimate_distances(pool, all_pairs(clients), self.distance, 0)
            reachable = _resolved_clients(clients, estimate)
            for coalition in self.solve(reachable, pool.sample_counts, estimate):
                trainer.add(coalition)
        else:
            estimate = DistanceEstimate.from_json(resume.checkpoint["distances"])
            trainer.restore(resume)
        t = first_round(resume)
        while True:
            estimate = self._place_newcomers(pool, trainer, estimate, t)
            step = trainer.step()
            if step is None:
                return
            outcomes, members = step
            checkpoint = {
                "coalitions": trainer.coalitions,
                "states": trainer.checkpoints(outcomes),
                "distances": estimate.to_json(),
            }
            outcome = merged_outcome(
                outcomes, members, trainer.coalitions, pool.sample_counts, checkpoint
            )
            t = outcome.round + 1
            yield outcome

    def solve(
        self, clients: Sequence[int], sample_counts: Mapping[int, int], estimate: DistanceEstimate
    ) -> list[list[int]]:
        """The coalitions minimising the objective over ``clients`` (sorted member lists)."""
        if not clients:
            return []
        sizes = [sample_counts[k] for k in clients]
        labels, _ = solve_coalitions(
            sizes, estimate.matrix(clients), self.c, self.seed, self.restarts
        )
        return [[clients[n] for n in group] for group in coalitions_of(labels)]

    def _place_newcomers(
        self, pool: ClientPool, trainer: CoalitionTrainer, estimate: DistanceEstimate, t: int
    ) -> DistanceEstimate:
        placed = sorted(k for c in trainer.coalitions for k in c)
        newcomers = sorted(set(pool.sample_counts) - set(placed))
        if not newcomers or t >= trainer.num_rounds:
            return estimate
        extra = estimate_distances(pool, pairs_with(newcomers, placed), self.distance, t)
        estimate = estimate.merged(extra)
        for k in _resolved_clients(newcomers, extra):
            self._place(k, trainer, pool.sample_counts, estimate, t)
        return estimate

    def _place(
        self,
        client: int,
        trainer: CoalitionTrainer,
        sample_counts: Mapping[int, int],
        estimate: DistanceEstimate,
        t: int,
    ) -> None:
        coalitions = trainer.coalitions
        placed = [k for c in coalitions for k in c]
        if not placed:
            trainer.add([client])
            return
        labels = np.array([n for n, c in enumerate(coalitions) for _ in c])
        order = [*placed, client]
        target = place_new_client(
            labels,
            [sample_counts[k] for k in order],
            estimate.matrix(order),
            self.c,
        )
        if target < len(coalitions):
            trainer.join(client, target, t)
        else:
            trainer.add([client], Resume(t - 1, {}))


def _resolved_clients(clients: Sequence[int], estimate: DistanceEstimate) -> list[int]:
    """The clients that answered every step (the others are treated as not there yet)."""
    failed = set(estimate.failed)
    return [k for k in clients if k not in failed]
