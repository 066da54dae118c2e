"""Every method on CUDA in both runtimes (issue 31), against the same runs on the CPU.

Skipped, with its reason, where torch sees no CUDA device (CI and the development machines);
it is written to run on a GPU machine. There (pytest-xdist may be absent, hence the emptied
addopts):

    python -m pytest -o addopts="" -rs -v -s tests/test_gpu.py

Each method runs in-process and in a real federation (2 clients, 2 rounds) with
``device=cuda``, and in-process on the CPU as the reference. CUDA's kernels do not sum in the
CPU's order, so results are equal within ``TOLERANCE`` (5 accuracy points on each client's
best test accuracy, and on the mean), not bitwise; what must hold exactly: every run finished
with no failed step, every client reported every round, and a method that fetched peer
models on the CPU fetched them on CUDA (before the fix DPFL's and the equilibrium's
collaboration failed on every GPU client and the runs went on without peers).

The ResNet-18 tests at the end train with ``training.amp`` (bf16, fp16 with loss scaling) and
``training.channels_last`` on CUDA (issue 41).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import collabfl.api as cf
from collabfl.cli.main import app
from collabfl.engine.recording import safe_name
from collabfl.engine.registry import REGISTRY
from collabfl.engine.report.run_dir import read_run
from collabfl.kernel.compute import Compute
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig, evaluate, train
from tests.support.runtime_equality import settings

pytestmark = [
    pytest.mark.federation,  # the federation runs (`federation up`) beside the in-process ones
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason=f"needs a CUDA device; torch {torch.__version__} sees none (runs on a GPU machine)",
    ),
]

CLIENTS, ROUNDS = 2, 2
TOLERANCE = 0.05
"""Largest difference in test accuracy (fraction) between a CUDA run and the CPU run."""
METHODS = REGISTRY.names()
SMALL = [
    *settings(clients=CLIENTS, rounds=ROUNDS),
    "fedcollab.restarts=5",
    "fedcollab.distance_rounds=3",
    "fedcollab.distance_local_steps=20",
    "equilibrium.init_epochs=1",
    "equilibrium.spo_hypernet_steps=3",
    "equilibrium.spo_search_steps=2",
]


def _run(root: Path, command: str, device: str) -> Path:
    out = root / f"{command}-{device}"
    overrides = [*SMALL, f"device={device}", f"data.cache_dir={json.dumps(str(root / 'cache'))}"]
    flags = [arg for o in overrides for arg in ("--set", o)]
    args = [*command.split(), *flags, "--methods", ",".join(METHODS), "--out", str(out)]
    if command == "compare":
        args += ["--set", "jobs=1"]
    else:
        args += ["--timeout", "600"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gpu")
    return {
        "cpu": _run(root, "compare", "cpu"),
        "in-process": _run(root, "compare", "cuda"),
        "federation": _run(root, "federation up", "cuda"),
    }


def _summary(out: Path, method: str) -> dict[str, Any]:
    summaries = json.loads((out / "summary.json").read_text())
    return next(s for s in summaries if s["method"] == method)


@pytest.mark.parametrize("runtime", ["in-process", "federation"])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_on_cuda_equals_the_cpu_run(runs, method, runtime):
    cuda, cpu = _summary(runs[runtime], method), _summary(runs["cpu"], method)
    print(
        f"\n{method:12} {runtime:10} cuda {cuda['mean_test_acc']:.4f}  "
        f"cpu {cpu['mean_test_acc']:.4f}  peer bytes {cuda['bytes_fetched_total']}"
    )
    assert cuda["status"] == "finished" and "step_failures" not in cuda
    assert cuda["clients_reported"] == cpu["clients_reported"]
    assert (cuda["bytes_fetched_total"] > 0) == (cpu["bytes_fetched_total"] > 0)
    assert cuda["mean_test_acc"] == pytest.approx(cpu["mean_test_acc"], abs=TOLERANCE)
    rows = read_run(runs[runtime] / safe_name(method)).rows
    reference = read_run(runs["cpu"] / safe_name(method)).rows
    assert [(r["round"], r["client"]) for r in rows] == [
        (r["round"], r["client"]) for r in reference
    ]
    assert len({r["client"] for r in rows}) == CLIENTS
    for a, b in zip(rows, reference, strict=True):
        assert a["best_test_acc"] == pytest.approx(b["best_test_acc"], abs=TOLERANCE), a


def _images_on_cuda(n: int = 64) -> TensorData:
    """Random images whose label is the brightest of ten bands: a ResNet learns it quickly."""
    generator = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (n,), generator=generator)
    x = torch.randn(n, 3, 32, 32, generator=generator) * 0.5
    for i, label in enumerate(y.tolist()):
        x[i, :, 3 * label : 3 * label + 3] += 2.0
    return TensorData(x.cuda(), y.cuda())


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
def test_resnet18_trains_on_cuda_with_amp_and_channels_last(amp, channels_last):
    data = _images_on_cuda()
    model = FlatModel(build_model("resnet18", 10, seed=0), "cuda")
    config = TrainingConfig(batch_size=16, lr=0.02, amp=amp, channels_last=channels_last)
    losses = [train(model, data, 1.0, config, torch.Generator().manual_seed(s)) for s in range(6)]
    loss, accuracy = evaluate(model, data, 32, compute=Compute.of(config))
    assert all(math.isfinite(value) for value in [*losses, loss]), (losses, loss)
    assert torch.isfinite(model.get()).all() and 0 <= accuracy <= 1
    assert losses[-1] < losses[0], (amp, channels_last, losses)


def _first_loss(amp: str, channels_last: bool) -> float:
    model = FlatModel(build_model("resnet18", 10, seed=0), "cuda")
    config = TrainingConfig(batch_size=32, amp=amp, channels_last=channels_last)
    return train(model, _images_on_cuda(), 1.0, config, torch.Generator().manual_seed(0), steps=1)


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_and_channels_last_compute_the_same_loss_as_float32(amp):
    reference = _first_loss("off", False)
    assert _first_loss("off", True) == pytest.approx(reference, rel=5e-3)
    assert _first_loss(amp, False) == pytest.approx(reference, rel=2e-2)
    assert _first_loss(amp, True) == pytest.approx(reference, rel=2e-2)


def test_resnet18_federation_round_in_process_with_bf16_on_cuda():
    rng = np.random.default_rng(0)

    def splits(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [
            (rng.standard_normal((n, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, n))
            for _ in range(3)
        ]

    for method in ("fedavg", "dpfl:budget=1"):
        result = cf.run(method, "resnet18", splits(32), None, splits(16), rounds=1,
                        batch_size=16, val_fraction=0.25, device="cuda",
                        overrides={"training.amp": "bf16", "training.channels_last": True,
                                   "dpfl.init_epochs": 0.5})  # fmt: skip
        assert result.status == "finished", method


@pytest.mark.parametrize("name", ["cifar_cnn", "resnet18"])
def test_lookahead_rewards_on_cuda_match_one_at_a_time(name):
    """GGC's six-at-a-time rewards (``dpfl.batched_rewards``, on by default on CUDA): the
    vmap losses on the GPU are the sequential ones to rounding (cuDNN convolutions run in
    TF32 by default, by different kernels for stacked weights)."""
    from collabfl.kernel.batched_eval import CandidateModels
    from collabfl.strategies.greedy import LOOKAHEAD_ROWS

    device = torch.device("cuda")
    torch.manual_seed(0)
    flat = FlatModel(build_model(name, 10, seed=0), device)
    data = TensorData(
        torch.randn(256, 3, 32, 32, device=device), torch.randint(0, 10, (256,), device=device)
    )
    candidates = CandidateModels(flat, data, LOOKAHEAD_ROWS, batch_size=128)
    base = flat.get()
    for i, row in enumerate(candidates.rows):
        row.copy_(base + 0.05 * i * base.abs().mean() * torch.randn_like(base))
    batched = candidates.losses(LOOKAHEAD_ROWS)
    sequential = []
    for row in candidates.rows:
        flat.load(row)
        sequential.append(evaluate(flat, data, batch_size=128, accuracy=False)[0])
    assert candidates.batched and batched == pytest.approx(sequential, rel=2e-3)  # cuDNN: TF32


def test_an_fp16_scaler_carries_its_scale_into_the_next_call():
    """The node keeps one GradScaler per slot (tests/test_fp16_scaler.py); ``train`` must
    step with the one it is given, so the scale it reached is where the next call starts."""
    device = torch.device("cuda")
    flat = FlatModel(build_model("resnet18", 10, seed=0), device)
    data = TensorData(
        torch.randn(64, 3, 32, 32, device=device), torch.randint(0, 10, (64,), device=device)
    )
    config = TrainingConfig(amp="fp16", batch_size=16, lr=0.05)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**24)  # overflows at first: it must fall
    train(flat, data, 1.0, config, torch.Generator().manual_seed(0), scaler=scaler)
    reached = scaler.get_scale()
    assert reached < 2.0**24
    train(flat, data, 1.0, config, torch.Generator().manual_seed(1), scaler=scaler)
    assert scaler.get_scale() <= 2 * reached  # it went on from there, not from 2^24
