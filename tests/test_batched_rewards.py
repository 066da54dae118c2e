"""GGC's look-ahead rewards (``dpfl.batched_rewards``): six candidate models read in one
call decide two peers with the same draws, in the same order, on the same averages as one
evaluation at a time; the batched losses are the sequential ones to float rounding, on
BatchNorm models too; a model vmap cannot run falls back to one at a time; ``auto`` leaves
the CPU path exactly as it was."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch import nn

from collabfl.client import node as node_module
from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.engine.builders import build_method
from collabfl.engine.config import validate_config
from collabfl.engine.methods import parse_method_spec
from collabfl.kernel.batched_eval import CandidateModels
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig, evaluate
from collabfl.strategies.greedy import LOOKAHEAD_ROWS, bggc
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Collaborate


class RecordingLookAhead:
    """Rows scored by the search's own loss function: every loss is exactly the sequential
    one, so decisions must match bit for bit; it records how many rows each call read."""

    def __init__(self, dim: int, loss) -> None:
        self.rows = [torch.empty(dim) for _ in range(LOOKAHEAD_ROWS)]
        self.loss = loss
        self.calls: list[int] = []

    def losses(self, count: int) -> list[float]:
        self.calls.append(count)
        return [self.loss(row) for row in self.rows[:count]]


def _federation(num_clients: int, dim: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    models = {j: torch.randn(dim, generator=generator) for j in range(1, num_clients)}
    weights = {j: float(17 + 13 * j) for j in models}
    target = torch.randn(dim, generator=generator) * 0.5
    own = torch.randn(dim, generator=generator)

    def loss(vector: torch.Tensor) -> float:
        return float(((vector - target) ** 2).mean())

    return own, models, weights, loss


def _loader(models, gone=()):
    @contextmanager
    def load(ids):
        yield {j: models[j] for j in ids if j not in gone}

    return load


def _search(seed, budget, batch_size, tie, lookahead=None, gone=()):
    own, models, weights, loss = _federation(9, 64, seed)
    return bggc(
        own, 40.0, list(models), weights, _loader(models, gone), loss, budget, batch_size,
        np.random.default_rng(seed), tie, lookahead=lookahead,
    )  # fmt: skip


@pytest.mark.parametrize("tie", ["add", "larger"])
@pytest.mark.parametrize(("budget", "batch_size"), [(None, None), (3, None), (8, 8), (4, 4)])
@pytest.mark.parametrize("seed", range(6))
def test_the_lookahead_makes_the_same_choice_and_the_same_model(seed, budget, batch_size, tie):
    plain = _search(seed, budget, batch_size, tie)
    _, _, _, loss = _federation(9, 64, seed)
    rows = RecordingLookAhead(64, loss)
    ahead = _search(seed, budget, batch_size, tie, lookahead=rows)
    assert ahead.chosen == plain.chosen
    assert torch.equal(ahead.aggregate, plain.aggregate)
    assert ahead.batches_loaded == plain.batches_loaded
    if batch_size is None or batch_size > 8:  # one resident batch: peers go in pairs
        assert rows.calls and set(rows.calls) == {LOOKAHEAD_ROWS}


def test_pairs_skip_a_vanished_peer_and_a_lone_last_peer_is_read_alone():
    rows = RecordingLookAhead(64, _federation(9, 64, 0)[3])
    plain = _search(0, None, None, "add", gone={3, 5})
    ahead = _search(0, None, None, "add", lookahead=rows, gone={3, 5})
    assert ahead.chosen == plain.chosen and torch.equal(ahead.aggregate, plain.aggregate)
    # 6 present peers: three pairs of six rows, plus the two initial rewards
    assert rows.calls == [LOOKAHEAD_ROWS] * 3
    assert ahead.reward_evaluations == 2 + 3 * LOOKAHEAD_ROWS
    odd = RecordingLookAhead(64, _federation(9, 64, 0)[3])
    _search(0, None, None, "add", lookahead=odd, gone={3})  # 7 present: the last alone
    assert odd.calls == [LOOKAHEAD_ROWS] * 3


def test_a_lookahead_with_too_few_rows_is_refused():
    rows = RecordingLookAhead(64, lambda v: 0.0)
    rows.rows = rows.rows[:2]
    with pytest.raises(ValueError, match="6 rows"):
        _search(0, None, None, "add", lookahead=rows)


@pytest.mark.parametrize(("name", "shape"), [("mnist1d_cnn", (1, 40)), ("resnet18", (3, 32, 32))])
def test_batched_losses_are_the_sequential_ones(name, shape):
    """resnet18 has BatchNorm: its running statistics are per-row buffers under vmap."""
    torch.manual_seed(0)
    flat = FlatModel(build_model(name, 10, seed=0))
    samples = 10 if name == "resnet18" else 50
    data = TensorData(torch.randn(samples, *shape), torch.randint(0, 10, (samples,)))
    base = flat.get()
    candidates = CandidateModels(flat, data, LOOKAHEAD_ROWS, batch_size=12)
    for i, row in enumerate(candidates.rows):
        row.copy_(base + 0.05 * i * base.abs().mean() * torch.randn_like(base))
    batched = candidates.losses(LOOKAHEAD_ROWS)
    sequential = []
    for row in candidates.rows:
        flat.load(row)
        sequential.append(evaluate(flat, data, batch_size=12, accuracy=False)[0])
    assert batched == pytest.approx(sequential, rel=1e-5, abs=1e-6)
    assert len(set(batched)) == LOOKAHEAD_ROWS  # the rows are six different models


class _Unbatchable(nn.Module):
    """A forward pass that reads a tensor's value on the host: vmap cannot run it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(40, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x.flatten(1))
        return out * 2.0 if out.sum().item() > 1e9 else out


def test_a_model_vmap_cannot_run_is_read_one_at_a_time_and_said_once(caplog):
    flat = FlatModel(_Unbatchable())
    data = TensorData(torch.randn(8, 1, 40), torch.randint(0, 10, (8,)))

    def one(vector: torch.Tensor) -> float:
        flat.load(vector)
        return evaluate(flat, data, accuracy=False)[0]

    candidates = CandidateModels(flat, data, LOOKAHEAD_ROWS, batch_size=64, fallback=one)
    base = flat.get()
    for i, row in enumerate(candidates.rows):
        row.copy_(base * (1.0 + 0.1 * i))
    expected = [one(row) for row in candidates.rows]
    with caplog.at_level(logging.WARNING, logger="collabfl.kernel.batched_eval"):
        assert candidates.losses(LOOKAHEAD_ROWS) == expected
        assert candidates.losses(LOOKAHEAD_ROWS) == expected
    warnings = [r for r in caplog.records if "batched_rewards" in r.getMessage()]
    assert len(warnings) == 1 and "_Unbatchable" in warnings[0].getMessage()
    assert not candidates.batched


def _node() -> ClientNode:
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(40, 1, 40, generator=generator)
    data = TensorData(x, torch.randint(0, 10, (40,), generator=generator))
    store = MemoryModelStore()
    own = workspace.get()
    for peer in range(1, 8):
        store.publish(peer, 0, own + 0.02 * peer * torch.randn(own.shape, generator=generator))
    return ClientNode(
        0, ClientSplits(data, data, data), workspace, own, TrainingConfig(), 0, store,
        PeerFetcher(store, workspace.numel),
    )  # fmt: skip


def _collaborate(monkeypatch, mode: str) -> tuple[tuple[int, ...], int, int, torch.Tensor]:
    """The chosen peers, reward evaluations, batched calls and new model of one search."""
    calls = []
    real = CandidateModels.losses

    def counting(self, count):
        calls.append(count)
        return real(self, count)

    monkeypatch.setattr(node_module.CandidateModels, "losses", counting)
    node = _node()
    task = Collaborate("greedy", tuple(range(1, 8)), (10.0,) * 7, None, batched_rewards=mode)
    reply = node.handle(Instruction(0, task))
    return reply.metrics.chosen, reply.metrics.reward_evaluations, len(calls), node.slot("model")


def test_a_client_reads_rewards_six_at_a_time_only_when_asked_or_on_cuda(monkeypatch):
    off = _collaborate(monkeypatch, "off")
    auto = _collaborate(monkeypatch, "auto")  # the CPU: exactly the sequential path
    on = _collaborate(monkeypatch, "on")
    assert off[2] == auto[2] == 0 and on[2] == 3  # seven peers: three pairs and one alone
    assert auto[:2] == off[:2] and torch.equal(auto[3], off[3])
    assert on[0] == off[0] and torch.allclose(on[3], off[3])  # same choice, same average
    assert on[1] == 2 + 3 * LOOKAHEAD_ROWS + 2


def test_the_option_reaches_the_collaborate_and_is_checked():
    workspace = FlatModel(build_model("mnist1d_cnn", num_classes=10, seed=0))
    config = validate_config({"dpfl": {"budget": 2, "batched_rewards": "on"}})
    strategy = build_method(
        parse_method_spec("dpfl", config), dict.fromkeys(range(4), 10), workspace
    )
    assert strategy.batched_rewards == "on"  # type: ignore[attr-defined]
    default = build_method(parse_method_spec("dpfl", validate_config({})), {0: 1, 1: 1}, workspace)
    assert default.batched_rewards == "auto"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="batched_rewards"):
        validate_config({"dpfl": {"batched_rewards": "always"}})
    with pytest.raises(ValueError, match="batched_rewards"):
        Collaborate("greedy", (1,), (1.0,), batched_rewards="yes")  # type: ignore[arg-type]
