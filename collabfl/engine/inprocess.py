"""The in-process runtime: every client of a federation in one Python process.

Instructions are direct method calls and peer fetches read a shared memory store, but they
go through the same two seams as a real federation (``ClientPool`` and ``PeerFetcher``), so
budgets are enforced and traffic is counted identically. This is the embedded default for
experiments: no sockets, paper-scale federations on a laptop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.engine.step_failures import StepLedger
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.objective import DEFAULT_OBJECTIVE, Objective
from collabfl.kernel.training_config import TrainingConfig
from collabfl.strategies.protocol import Instruction, Reply, StepFailed

log = logging.getLogger(__name__)


class InProcessFederation:
    """A ``ClientPool`` whose clients are ``ClientNode`` objects in this process."""

    def __init__(self, nodes: Mapping[int, ClientNode]) -> None:
        self.nodes = dict(nodes)
        self._sample_counts = {k: node.num_samples for k, node in self.nodes.items()}
        self.step_ledger = StepLedger()
        """Which steps failed (a real federation's client errors), for the round driver."""

    @property
    def sample_counts(self) -> Mapping[int, int]:
        return self._sample_counts

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        """Each client's reply; a client whose step raised is absent, as in a federation."""
        present = {k: ins for k, ins in instructions.items() if k in self.nodes}
        self.step_ledger.sent({k: [ins] for k, ins in present.items()})
        replies = {}
        for k, instruction in present.items():
            try:
                replies[k] = self.nodes[k].answer(instruction)
            except StepFailed as error:
                log.warning("round %s client %s: %s", instruction.round, k, error)
                self.step_ledger.failed(instruction.round, k, str(error))
        return replies


def build_federation(
    splits: Sequence[ClientSplits],
    workspace: FlatModel,
    training: TrainingConfig,
    seed: int,
    objective: Objective = DEFAULT_OBJECTIVE,
) -> InProcessFederation:
    """Clients 0..N-1 sharing one workspace module and one in-memory model store.

    All clients start from the workspace's current state (the seeded initial model) and
    train and evaluate with ``objective``.
    """
    store = MemoryModelStore(keep_rounds=2)
    initial = workspace.get()
    nodes = {
        k: ClientNode(
            client_id=k,
            data=data,
            workspace=workspace,
            initial_model=initial,
            training=training,
            seed=seed,
            publisher=store,
            fetcher=PeerFetcher(store, workspace.numel),
            objective=objective,
        )
        for k, data in enumerate(splits)
    }
    return InProcessFederation(nodes)
