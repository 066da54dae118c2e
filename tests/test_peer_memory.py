"""The budget where it bites (issue 41, item 4): a DPFL client's collaboration step holds at
most (Bc + 1) models' worth of peer memory (peer models and the search's running sums) on
top of its own model, measured by counting the model-sized storages it allocates."""

from __future__ import annotations

import pytest
import torch
from memory_probe import StoragePeak
from torch import nn

from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.training import TensorData, TrainingConfig
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Collaborate

WIDTH = 1100
"""An MLP of about 4.9 MB: several times the in-place arithmetic's 1 MiB slices."""


class CopyingStore(MemoryModelStore):
    """The in-process store, but a fetch returns a copy, as a model read from the network."""

    probe: StoragePeak | None = None

    def fetch(self, owner: int, round_index: int) -> torch.Tensor:
        return super().fetch(owner, round_index).clone()


class WireStore(CopyingStore):
    """Fetched in the fetcher's threads, as the federated runtime's gRPC source is, each model
    decoded from bytes; the probe is told of each, as it cannot see other threads."""

    fetches_wait = True

    def fetch(self, owner: int, round_index: int) -> torch.Tensor:
        payload = MemoryModelStore.fetch(self, owner, round_index).numpy().tobytes()
        vector = torch.frombuffer(bytearray(payload), dtype=torch.float32)
        del payload
        assert self.probe is not None
        self.probe.track(vector)
        return vector


def _node(num_clients: int, store: CopyingStore) -> tuple[ClientNode, int]:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(40, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                           nn.Linear(WIDTH, 10))  # fmt: skip
    workspace = FlatModel(module)
    x, y = torch.randn(12, 40), torch.randint(0, 10, (12,))
    data = TensorData(x, y)
    own = workspace.get()
    for peer in range(1, num_clients):
        store.publish(peer, 0, own + 0.01 * peer * torch.randn(workspace.numel))
    node = ClientNode(
        0, ClientSplits(data, data, data), workspace, own, TrainingConfig(), 0, store,
        PeerFetcher(store, workspace.numel),
    )  # fmt: skip
    return node, workspace.nbytes


@pytest.mark.parametrize("store", [CopyingStore, WireStore], ids=["in-process", "federated"])
@pytest.mark.parametrize(
    ("search", "num_clients", "budget"),
    [("greedy", 7, 2), ("greedy", 3, 2), ("greedy", 5, 1), ("greedy", 9, 3), ("none", 5, 2)],
)
def test_a_collaboration_step_holds_at_most_budget_plus_one_models(
    search, num_clients, budget, store
):
    node, model_bytes = _node(num_clients, store())
    candidates = tuple(range(1, num_clients))
    if search == "none":
        candidates = candidates[:budget]
    task = Collaborate(search, candidates, tuple(10.0 + j for j in candidates), budget)
    with StoragePeak(min_bytes=model_bytes // 2) as probe:
        node.fetcher.source.probe = probe  # type: ignore[attr-defined]
        node.handle(Instruction(0, task))
    assert probe.peak >= model_bytes * min(budget, len(candidates))  # the probe sees the peers
    assert probe.peak <= (budget + 1) * model_bytes
