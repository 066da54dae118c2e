"""DPFL (Algorithm 1 of the paper): clients choose their own collaborators under a budget.

The coordinator only sequences the rounds and passes candidate lists and sample counts;
every client runs the greedy search itself (strategies.greedy) and fetches peer models
directly from their owners, so the directed collaboration graph emerges from the clients'
choices and no model weights pass through the coordinator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from collabfl.kernel.graph_edges import Edge
from collabfl.strategies.greedy import TieRule
from collabfl.strategies.protocol import ClientPool, Instruction, Reply, run_programs
from collabfl.strategies.rounds import (
    Resume,
    RoundOutcome,
    chosen_peers,
    first_round,
    merge_metrics,
)
from collabfl.strategies.verbs import BatchedRewards, Collaborate, Evaluate, PeersOn, Search, Train

GraphRule = Literal["ggc", "random"]


@dataclass(frozen=True)
class DPFL:
    """Round 0 is the preprocessing of the paper: ``init_epochs`` of local training from the
    shared initial model, BGGC over all other clients to get the candidate list Ω_k
    (|Ω_k| ≤ budget), and averaging with Ω_k. Every later round: ``epochs`` of local
    training, GGC over Ω_k (every ``select_every`` rounds; the last choice is reused in
    between), and averaging with the chosen collaborators.

    ``graph="random"`` is the paper's ablation: each client draws Ω_k uniformly at random
    (same budget) and always averages with all of it. ``score_local``: the post-training
    model also competes for the reported best-validation model (the official code does).
    ``collaborate_every``: rounds t ≥ 1 with t mod P ≠ 0 are purely local (train and
    evaluate, no graph); the official code averages every second round (P = 2). ``tie``:
    GGC's rule when neither gain is positive (strategies.greedy.TieRule). ``peers_on`` and
    ``reward_samples``: where clients hold peer models, and how many validation samples
    GGC's rewards use; ``batched_rewards``: whether they read them six at a time
    (strategies.verbs.Collaborate).
    """

    epochs: float
    init_epochs: float
    budget: int | None
    select_every: int = 1
    collaborate_every: int = 1
    tie: TieRule = "add"
    peers_on: PeersOn = "device"
    reward_samples: int | None = None
    batched_rewards: BatchedRewards = "auto"
    graph: GraphRule = "ggc"
    score_local: bool = False
    name: str = "dpfl"

    def __post_init__(self) -> None:
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"budget must be >= 0 or None (unlimited), got {self.budget}")
        if self.select_every < 1:
            raise ValueError(f"select_every must be >= 1, got {self.select_every}")
        if self.collaborate_every < 1:
            raise ValueError(f"collaborate_every must be >= 1, got {self.collaborate_every}")

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        # Each round is one program per client (strategies.protocol.run_programs): train,
        # then collaborate on peers' models of this round, then evaluate.
        if resume is None:
            if num_rounds < 1:
                return
            clients = sorted(pool.sample_counts)
            first_search: Search = "greedy" if self.graph == "ggc" else "random"
            # Sorted: the candidate order seeds GGC's visiting order.
            everyone = {k: [j for j in clients if j != k] for k in clients}
            trained, collaborated, evaluated = self._collaborating_round(
                pool, 0, self.init_epochs, everyone, first_search
            )
            candidates = chosen_peers(collaborated)
            chosen = candidates
            yield self._outcome(pool, 0, trained, collaborated, evaluated, candidates, chosen)
        else:
            # A coalition that starts mid-run (strategies.coalitions) resumes from nothing.
            candidates = _int_lists(resume.checkpoint.get("candidates", {}))
            chosen = _int_lists(resume.checkpoint.get("chosen", {}))

        for t in range(max(1, first_round(resume)), num_rounds):
            clients = sorted(pool.sample_counts)
            if t % self.collaborate_every:
                train = Instruction(t, Train(self.epochs, score_local=self.score_local))
                local = {k: [train, Instruction(t, Evaluate())] for k in clients}
                trained, evaluated = run_programs(pool, local)
                checkpoint = {"candidates": candidates, "chosen": chosen}
                yield RoundOutcome(t, merge_metrics(trained, evaluated), None, checkpoint)
                continue
            search_now = self.graph == "ggc" and (t - 1) % self.select_every == 0
            lists = candidates if search_now else chosen
            peers = {k: [j for j in lists.get(k, []) if j in pool.sample_counts] for k in clients}
            trained, collaborated, evaluated = self._collaborating_round(
                pool, t, self.epochs, peers, "greedy" if search_now else "none"
            )
            chosen = chosen_peers(collaborated)
            yield self._outcome(pool, t, trained, collaborated, evaluated, candidates, chosen)

    def _collaborating_round(
        self,
        pool: ClientPool,
        t: int,
        epochs: float,
        peers: Mapping[int, list[int]],
        search: Search,
    ) -> list[dict[int, Reply]]:
        """Train and publish, collaborate over ``peers``, evaluate: replies of each step."""
        counts = pool.sample_counts
        train = Instruction(t, Train(epochs, publish=True, score_local=self.score_local))
        programs = {
            k: [
                train,
                Instruction(
                    t,
                    Collaborate.weighted_by_samples(
                        search,
                        candidates,
                        counts,
                        self.budget,
                        tie=self.tie,
                        peers_on=self.peers_on,
                        reward_samples=self.reward_samples,
                        batched_rewards=self.batched_rewards,
                    ),
                ),
                Instruction(t, Evaluate()),
            ]
            for k, candidates in peers.items()
        }
        return run_programs(pool, programs)

    def _outcome(
        self,
        pool: ClientPool,
        t: int,
        trained: Mapping[int, Reply],
        collaborated: Mapping[int, Reply],
        evaluated: Mapping[int, Reply],
        candidates: dict[int, list[int]],
        chosen: dict[int, list[int]],
    ) -> RoundOutcome:
        return RoundOutcome(
            t,
            merge_metrics(trained, collaborated, evaluated),
            collaboration_edges(collaborated, pool.sample_counts),
            {"candidates": candidates, "chosen": chosen},
        )


def _int_lists(lists: Mapping[str, list[int]]) -> dict[int, list[int]]:
    """Checkpoints may come back from JSON with string keys."""
    return {int(k): [int(j) for j in v] for k, v in lists.items()}


def collaboration_edges(
    collaborated: Mapping[int, Reply], sample_counts: Mapping[int, int]
) -> list[Edge]:
    """Edges (k, j, weight of j in k's average) from the clients' reported choices."""
    edges: list[Edge] = []
    for k, chosen in sorted(chosen_peers(collaborated).items()):
        total = sample_counts[k] + sum(sample_counts[j] for j in chosen)
        edges.extend((k, j, sample_counts[j] / total) for j in chosen)
    return edges
