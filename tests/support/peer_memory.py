"""A DPFL client whose collaboration step can be measured: an MLP big enough that the
in-place arithmetic's slices are small beside it, peers published on the CPU (as a model
read from the network arrives), and the model-sized storages the step keeps alive counted
(tests/support/memory_probe.py). Shared by tests/test_peer_memory.py and
benchmarks/dpfl_memory.py."""

from __future__ import annotations

import torch
from torch import nn

from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Collaborate
from tests.support.memory_probe import StoragePeak


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
        if self.probe is not None:
            self.probe.track(vector)
        return vector


def mlp_node(
    width: int, num_clients: int, store: CopyingStore, device: str = "cpu", val: int = 12
) -> ClientNode:
    """Client 0 of ``num_clients`` with a 40-``width``-``width``-10 MLP on ``device``; every
    peer has published a perturbed copy of its model for round 0, on the CPU."""
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Linear(40, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
    )
    workspace = FlatModel(module, device)
    data = TensorData(
        torch.randn(val, 40, device=device), torch.randint(0, 10, (val,), device=device)
    )
    own = workspace.get()
    for peer in range(1, num_clients):
        store.publish(peer, 0, own.cpu() + 0.01 * peer * torch.randn(workspace.numel))
    fetcher = PeerFetcher(store, workspace.numel)
    return ClientNode(
        0, ClientSplits(data, data, data), workspace, own, TrainingConfig(), 0, store, fetcher
    )


def collaboration_peak(node: ClientNode, task: Collaborate, device_type: str | None = None) -> int:
    """Peak bytes of model-sized storages (half a model or more) the step kept alive at once
    (on ``device_type`` alone when given)."""
    with StoragePeak(node.workspace.nbytes // 2, device_type) as probe:
        node.fetcher.source.probe = probe  # type: ignore[attr-defined]
        node.handle(Instruction(0, task))
    return probe.peak
