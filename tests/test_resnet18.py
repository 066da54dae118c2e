"""The built-in ResNet-18 (CIFAR stem): its shape, its BatchNorm state in a FlatModel, and
one round of the methods that average (FedAvg) and that fetch and average peers (DPFL)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import collabfl.api as cf
from collabfl.engine.config import validate_config
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model

pytestmark = pytest.mark.slow


def test_resnet18_has_the_cifar_stem_and_its_size():
    model = build_model("resnet18", 10, seed=0)
    stem = model[0]
    assert isinstance(stem, nn.Conv2d)
    assert (stem.kernel_size, stem.stride) == ((3, 3), (1, 1))
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    assert sum(p.numel() for p in model.parameters()) == 11_173_962
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_resnet18_running_statistics_travel_and_the_counters_stay():
    flat = FlatModel(build_model("resnet18", 10, seed=0))
    running = sum(b.numel() for b in flat.module.buffers() if b.is_floating_point())
    counters = [b for b in flat.module.buffers() if not b.is_floating_point()]
    assert flat.numel == flat.num_parameters + running
    assert counters and all(c.dtype == torch.int64 for c in counters)


def test_resnet18_is_a_config_model_name():
    assert validate_config({"data": {"dataset": "cifar10"}, "model": {"name": "resnet18"}})


def _images(clients: int, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((n, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, n))
        for _ in range(clients)
    ]


@pytest.mark.parametrize("method", ["fedavg", "dpfl:budget=1"])
def test_resnet18_runs_a_round_of_averaging_methods(method: str) -> None:
    result = cf.run(
        method,
        "resnet18",
        _images(3, 20, 0),
        None,
        _images(3, 8, 1),
        rounds=1,
        batch_size=8,
        val_fraction=0.2,
        overrides={"dpfl.init_epochs": 0.5} if method.startswith("dpfl") else None,
    )
    assert result.status == "finished"
    losses = [row["train_loss"] for row in result.history if row.get("train_loss") is not None]
    assert losses and all(math.isfinite(loss) for loss in losses)
    if method.startswith("dpfl"):
        assert any(row.get("num_collaborators") for row in result.history)
