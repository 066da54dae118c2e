"""SPO over a federation: the clients answer the loss oracle, the coordinator runs the search.

The Pareto hypernetwork and the search over simplex weights live on the coordinator
(strategies.spo); every loss and gradient they need is one GRADIENT message per client, so
the clients' data never leaves them and the coordinator sees only target models going out and
losses and gradients coming back. Each query carries a running ``step`` so that its mini-batch
is seeded and a real federation repeats the in-process runtime exactly.

A client that fails to answer, or answers with something unusable, is dropped from the search
of the set it was in and from every later set: it ends alone, and the set's search starts
again without it (a hypernetwork is built for a fixed set of clients).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from collabfl.strategies.equilibrium import OcsEstimator, OcsMap
from collabfl.strategies.protocol import ClientPool, FlatVector, Instruction
from collabfl.strategies.spo import OracleAnswer, OracleError, SpoSettings, spo_estimator
from collabfl.strategies.verbs import Gradient, Split


class PoolLossOracle:
    """A LossOracle answered by the pool's clients (missing replies are left out)."""

    def __init__(self, pool: ClientPool, round_index: int, batch_size: int) -> None:
        self.pool = pool
        self.round_index = round_index
        self.batch_size = batch_size
        self.queries = 0

    def loss_and_grad(self, models: Mapping[int, FlatVector], split: Split) -> OracleAnswer:
        task = Gradient(split, self.batch_size, self.queries)
        self.queries += 1
        instructions = {
            k: Instruction(self.round_index, task, model) for k, model in models.items()
        }
        replies = self.pool.send(instructions)
        return {k: (reply.metrics.loss, _on_cpu(reply.model)) for k, reply in replies.items()}


def _on_cpu(gradient: FlatVector | None) -> FlatVector | None:
    """The hypernetwork lives on the coordinator's CPU; a client's gradient may come back on
    its own device (in-process on a GPU). A missing one is left for the search's reply check
    to reject."""
    return None if gradient is None else gradient.detach().to("cpu")


@dataclass(frozen=True)
class SpoSearch:
    """How the equilibrium estimates OCSs with SPO. ``start``: the shared initial model, where
    every set's front begins (its size is the clients' model size); ``batch_size``: training
    samples per client per hypernetwork step (0: all of them)."""

    start: torch.Tensor
    settings: SpoSettings = field(default_factory=SpoSettings)
    batch_size: int = 0
    seed: int = 0

    def estimator(self, pool: ClientPool, round_index: int = 0) -> FederatedSpo:
        return FederatedSpo(self, PoolLossOracle(pool, round_index, self.batch_size))


class FederatedSpo:
    """An OcsEstimator that goes on without the clients that break the oracle."""

    def __init__(self, search: SpoSearch, oracle: PoolLossOracle) -> None:
        self.oracle = oracle
        self.failed: set[int] = set()
        self.problems: list[str] = []
        start = search.start.detach().to("cpu", torch.float32)
        self._estimate: OcsEstimator = spo_estimator(
            oracle, start.numel(), search.settings, search.seed, start
        )

    def __call__(self, clients: frozenset[int]) -> OcsMap:
        alive = clients - self.failed
        while True:
            try:
                ocs = dict(self._estimate(alive)) if alive else {}
                break
            except OracleError as error:
                if not error.clients or not error.clients <= alive:
                    raise
                self.failed |= error.clients
                self.problems.append(str(error))
                alive = alive - error.clients
        return {**ocs, **{k: frozenset({k}) for k in clients - alive}}
