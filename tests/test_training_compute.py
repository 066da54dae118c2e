"""training.amp, channels_last, loader_workers and eval_batch_size on the CPU: the defaults
change nothing, bf16 trains, fp16 is refused where it cannot run, and evaluation reads in
``eval_batch_size`` batches (tests/test_gpu.py runs the CUDA side)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset, get_worker_info

import collabfl.api as cf
from collabfl.engine.config import ConfigError, validate_config
from collabfl.kernel.compute import Compute
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.loader import batch_inputs
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.streamed import StreamedData
from collabfl.kernel.training import TrainingConfig, batch_plan, evaluate, train

pytestmark = pytest.mark.slow

CPU = torch.device("cpu")


def _images(clients: int, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((n, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, n))
        for _ in range(clients)
    ]


def _datasets(splits: list[tuple[np.ndarray, np.ndarray]]) -> list[TensorDataset]:
    return [TensorDataset(torch.as_tensor(x), torch.as_tensor(y)) for x, y in splits]


def _history(overrides: dict[str, Any], stream: bool = False) -> list[dict[str, Any]]:
    train_splits, test_splits = _images(3, 40, 0), _images(3, 20, 1)
    result = cf.run(
        "dpfl:budget=1",
        "cifar_cnn",
        _datasets(train_splits) if stream else train_splits,
        _images(3, 10, 2),
        _datasets(test_splits) if stream else test_splits,
        rounds=2,
        batch_size=8,
        stream=stream,
        overrides={"dpfl.init_epochs": 1.0, "training.eval_batch_size": 8, **overrides},
    )
    # Everything but the timings (train_s, fetch_s, ...).
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in result.history]


DEFAULTS = {"training.amp": "off", "training.channels_last": False, "training.loader_workers": 0}


def test_explicit_defaults_give_the_same_numbers():
    assert _history({}) == _history(DEFAULTS)


def test_loader_workers_read_the_same_batches():
    assert _history({}, stream=True) == _history({"training.loader_workers": 2}, stream=True)


class _Counted(Dataset[tuple[torch.Tensor, int]]):
    """Items i → (a tensor of i, i), counting the reads made in worker processes."""

    def __init__(self) -> None:
        self.in_workers = torch.zeros(1, dtype=torch.long).share_memory_()

    def __len__(self) -> int:
        return 30

    def __getitem__(self, item: int) -> tuple[torch.Tensor, int]:
        if get_worker_info() is not None:
            self.in_workers += 1
        return torch.full((2, 2), float(item)), item


def test_workers_read_a_streamed_split_in_the_loops_order():
    dataset = _Counted()
    rows = torch.arange(30)
    data = StreamedData(dataset, rows, rows.clone(), (2, 2), CPU)
    plan = list(batch_plan(30, 7, 8, torch.Generator().manual_seed(0), CPU))
    read = list(batch_inputs(data, plan, 2))
    assert int(dataset.in_workers) == 7 * 8 - 2  # 30 = 8 + 8 + 8 + 6 per epoch
    for batch, (_, index) in zip(read, plan, strict=True):
        assert torch.equal(batch[:, 0, 0], index.to(torch.float32))


def test_channels_last_on_the_cpu_trains_to_nearly_the_same_model():
    plain, nhwc = _history({}), _history({"training.channels_last": True})
    for row, other in zip(plain, nhwc, strict=True):
        if row.get("train_loss") is not None:
            assert other["train_loss"] == pytest.approx(row["train_loss"], rel=1e-3)


def _module_and_data() -> tuple[FlatModel, TensorData]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (48,), generator=generator)
    return FlatModel(build_model("cifar_cnn", 10, seed=0)), TensorData(x, y)


def test_bf16_on_the_cpu_trains_and_evaluates():
    model, data = _module_and_data()
    config = TrainingConfig(amp="bf16", batch_size=16)
    before, _ = evaluate(model, data, 16, compute=Compute.of(config))
    losses = [train(model, data, 1.0, config, torch.Generator().manual_seed(s)) for s in range(4)]
    after, accuracy = evaluate(model, data, 16, compute=Compute.of(config))
    assert all(math.isfinite(loss) for loss in losses)
    assert after < before and 0 <= accuracy <= 1


def test_fp16_is_refused_on_the_cpu():
    with pytest.raises(ConfigError, match=r"training\.amp=fp16 needs a CUDA device"):
        validate_config({"device": "cpu", "training": {"amp": "fp16"}})
    model, data = _module_and_data()
    with pytest.raises(ValueError, match="needs a CUDA device"):
        train(model, data, 1.0, TrainingConfig(amp="fp16"), torch.Generator())
    with pytest.raises(ValueError, match="needs a CUDA device"):
        evaluate(model, data, compute=Compute(amp="fp16"))


def test_fp16_is_refused_before_an_in_process_run_starts():
    with pytest.raises(ConfigError, match="fp16"):
        cf.run("local", "cifar_cnn", _images(2, 8, 0), None, _images(2, 8, 1),
               device="cpu", overrides={"training.amp": "fp16"})  # fmt: skip


def test_unknown_amp_and_negative_workers_are_refused():
    with pytest.raises(ConfigError, match=r"training\.amp"):
        validate_config({"training": {"amp": "fp8"}})
    with pytest.raises(ConfigError, match=r"training\.loader_workers"):
        validate_config({"training": {"loader_workers": -1}})


class _Recorder(nn.Module):
    """cifar_cnn that notes the batch size of every forward pass in evaluation mode."""

    def __init__(self, seen: list[int]) -> None:
        super().__init__()
        self.net = build_model("cifar_cnn", 10, seed=0)
        self.seen = seen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            self.seen.append(int(x.shape[0]))
        return self.net(x)


def test_evaluation_reads_eval_batch_size_samples_at_a_time():
    seen: list[int] = []
    cf.run("local", lambda: _Recorder(seen), _images(1, 40, 0), None, _images(1, 13, 1),
           rounds=1, batch_size=8, val_fraction=0.25,
           overrides={"training.eval_batch_size": 5})  # fmt: skip
    assert seen and max(seen) == 5
    assert 3 in seen  # the test split's 13 samples: 5, 5, 3
