"""fp16's loss scaler lives as long as the client's slot, not one round: a fresh GradScaler
starts at 2^16 and skips the steps that overflow until its scale has come down, which every
round paid again before (tests/test_gpu.py shows the scale carried on CUDA; fp16 is refused
on the CPU, so here the node's own scalers are checked)."""

from __future__ import annotations

import torch

from collabfl.client import node as node_module
from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Train


def _node(amp: str) -> ClientNode:
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 1, 40, generator=generator)
    data = TensorData(x, torch.randint(0, 10, (16,), generator=generator))
    store = MemoryModelStore()
    return ClientNode(
        0, ClientSplits(data, data, data), workspace, workspace.get(),
        TrainingConfig(amp=amp), 0, store, PeerFetcher(store, workspace.numel),
    )  # fmt: skip


def _scalers_passed(monkeypatch, amp: str, slots: list[str]) -> list[object]:
    passed: list[object] = []

    def recording_train(model, *args, scaler=None, **kwargs):
        passed.append(scaler)
        return 0.0

    monkeypatch.setattr(node_module, "train", recording_train)
    node = _node(amp)
    for round_index, slot in enumerate(slots):
        node.handle(Instruction(round_index, Train(epochs=1.0, slot=slot)))
    return passed


def test_an_fp16_client_keeps_one_scaler_per_slot_across_rounds(monkeypatch):
    first, second, personal = _scalers_passed(monkeypatch, "fp16", ["model", "model", "personal"])
    assert isinstance(first, torch.amp.GradScaler)
    assert second is first  # the scale the first round reached is where the next one starts
    assert isinstance(personal, torch.amp.GradScaler) and personal is not first


def test_other_precisions_take_no_scaler(monkeypatch):
    assert _scalers_passed(monkeypatch, "off", ["model", "model"]) == [None, None]
    assert _scalers_passed(monkeypatch, "bf16", ["model"]) == [None]
