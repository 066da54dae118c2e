"""Local training: every client trains alone. The lower bound for collaboration."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from collabfl.strategies.protocol import ClientPool, Instruction, run_programs
from collabfl.strategies.rounds import Resume, RoundOutcome, first_round, merge_metrics
from collabfl.strategies.verbs import Evaluate, Train


@dataclass(frozen=True)
class Local:
    """Each round: ``epochs`` of local SGD, then evaluation. No model leaves a client."""

    epochs: float
    name: str = "local"

    def rounds(
        self, pool: ClientPool, num_rounds: int, resume: Resume | None = None
    ) -> Iterator[RoundOutcome]:
        for t in range(first_round(resume), num_rounds):
            steps = [Instruction(t, Train(self.epochs)), Instruction(t, Evaluate())]
            programs = dict.fromkeys(sorted(pool.sample_counts), steps)
            trained, evaluated = run_programs(pool, programs)
            yield RoundOutcome(t, merge_metrics(trained, evaluated))
