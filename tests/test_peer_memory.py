"""The budget where it bites (issue 41, item 4): a DPFL client's collaboration step holds at
most (Bc + 1) models' worth of peer memory (peer models and the search's running sums) on
top of its own model, measured by counting the model-sized storages it allocates."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from collabfl.client.peers import PeerFetcher
from collabfl.strategies.verbs import Collaborate
from tests.support.peer_memory import CopyingStore, WireStore, collaboration_peak, mlp_node

WIDTH = 1100
"""An MLP of about 4.9 MB: several times the in-place arithmetic's 1 MiB slices."""


@pytest.mark.parametrize("store", [CopyingStore, WireStore], ids=["in-process", "federated"])
@pytest.mark.parametrize(
    ("search", "num_clients", "budget"),
    [("greedy", 7, 2), ("greedy", 3, 2), ("greedy", 5, 1), ("greedy", 9, 3), ("none", 5, 2)],
)
def test_a_collaboration_step_holds_at_most_budget_plus_one_models(
    search, num_clients, budget, store
):
    node = mlp_node(WIDTH, num_clients, store())
    model_bytes = node.workspace.nbytes
    candidates = tuple(range(1, num_clients))
    if search == "none":
        candidates = candidates[:budget]
    task = Collaborate(search, candidates, tuple(10.0 + j for j in candidates), budget)
    peak = collaboration_peak(node, task)
    assert peak >= model_bytes * min(budget, len(candidates))  # the probe sees the peers
    assert peak <= (budget + 1) * model_bytes


def test_a_peer_model_moved_to_the_device_leaves_no_host_copy_behind():
    """``peers_on = "device"``: the fetched (host) model goes once the node has replaced it
    with its device copy, so the host does not hold the batch through the search."""
    store = CopyingStore()
    for peer in (1, 2):
        store.publish(peer, 0, torch.zeros(10))
    fetched: list[weakref.ref[torch.Tensor]] = []

    class Recording(CopyingStore):
        def fetch(self, owner: int, round_index: int) -> torch.Tensor:
            vector = store.fetch(owner, round_index)
            fetched.append(weakref.ref(vector))
            return vector

    with PeerFetcher(Recording(), 10).hold([1, 2], 0, limit=2) as models:
        for peer, model in models.items():
            models[peer] = model.to("meta")
        del model
        gc.collect()
        assert [ref() for ref in fetched] == [None, None]
