"""``dpfl.reward_samples`` and ``dpfl.peers_on``: GGC's rewards on a fixed validation subset
of exactly N samples, drawn once per client; the options reach every client's Collaborate."""

from __future__ import annotations

import pytest
import torch

from collabfl.client import node as node_module
from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.engine.builders import build_method
from collabfl.engine.config import validate_config
from collabfl.engine.methods import parse_method_spec
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Collaborate

VAL = 30


def _node(client_id: int = 0, seed: int = 0) -> ClientNode:
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    generator = torch.Generator().manual_seed(1)
    # Each validation sample is told apart by its first input value: its index.
    x = torch.randn(VAL, 1, 40, generator=generator)
    x[:, 0, 0] = torch.arange(VAL, dtype=torch.float32)
    data = TensorData(x, torch.randint(0, 10, (VAL,), generator=generator))
    store = MemoryModelStore()
    own = workspace.get()
    for round_index in (0, 1):
        for peer in (1, 2, 3):
            store.publish(peer, round_index, own + 0.01 * peer)
    return ClientNode(
        client_id, ClientSplits(data, data, data), workspace, own, TrainingConfig(), seed, store,
        PeerFetcher(store, workspace.numel),
    )  # fmt: skip


def _rewarded_rows(monkeypatch, node: ClientNode, rounds: tuple[int, ...], samples: int | None):
    """The validation rows of every reward evaluation of a greedy search in each round."""
    seen: list[tuple[int, ...]] = []
    real = node_module.evaluate

    def recording(model, data, *args, **kwargs):
        if kwargs.get("accuracy") is False:
            seen.append(tuple(int(v) for v in data.x[:, 0, 0]))
        return real(model, data, *args, **kwargs)

    monkeypatch.setattr(node_module, "evaluate", recording)
    for round_index in rounds:
        task = Collaborate("greedy", (1, 2, 3), (10.0, 20.0, 30.0), 2, reward_samples=samples)
        node.handle(Instruction(round_index, task))
    return seen


def test_rewards_use_exactly_n_fixed_samples(monkeypatch):
    seen = _rewarded_rows(monkeypatch, _node(), (0, 1), 7)
    assert len(seen) >= 4 and len(set(seen)) == 1  # the same subset in every round
    (rows,) = set(seen)
    assert len(rows) == len(set(rows)) == 7 and rows == tuple(sorted(rows))
    again = _rewarded_rows(monkeypatch, _node(), (1,), 7)
    assert set(again) == {rows}  # drawn from (seed, client) alone: a restart draws the same
    other = _rewarded_rows(monkeypatch, _node(client_id=4), (0,), 7)
    assert set(other) != {rows}


@pytest.mark.parametrize("samples", [None, VAL, 10 * VAL])
def test_rewards_use_the_whole_split_by_default_or_when_n_covers_it(monkeypatch, samples):
    seen = _rewarded_rows(monkeypatch, _node(), (0,), samples)
    assert set(seen) == {tuple(range(VAL))}


def test_the_options_reach_every_clients_collaborate():
    workspace = FlatModel(build_model("mnist1d_cnn", num_classes=10, seed=0))
    config = validate_config({"dpfl": {"budget": 2, "peers_on": "host", "reward_samples": 64}})
    strategy = build_method(
        parse_method_spec("dpfl", config), dict.fromkeys(range(4), 10), workspace
    )
    assert (strategy.peers_on, strategy.reward_samples) == ("host", 64)  # type: ignore[attr-defined]
    default = build_method(parse_method_spec("dpfl", validate_config({})), {0: 1, 1: 1}, workspace)
    assert (default.peers_on, default.reward_samples) == ("device", None)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="reward_samples"):
        validate_config({"dpfl": {"reward_samples": 0}})
    with pytest.raises(ValueError, match="peers_on"):
        validate_config({"dpfl": {"peers_on": "disk"}})


def test_peers_held_in_host_memory_give_the_same_model_on_the_cpu():
    models = []
    for peers_on in ("device", "host"):
        node = _node()
        task = Collaborate("greedy", (1, 2, 3), (10.0, 20.0, 30.0), 2, peers_on=peers_on)
        node.handle(Instruction(0, task))
        models.append(node.slots["model"])
    assert torch.equal(models[0], models[1])
