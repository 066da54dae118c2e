"""The model, each node's generated data, and local training/evaluation (no Flower here)."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

Config = Mapping[str, int | float | str | bool | bytes]


def build_model(config: Config) -> nn.Module:
    """A 1-D CNN with the layer sizes of collabfl's MNIST-1D model (3 convolutions, 2 dense)."""
    c, length = int(config["channels"]), int(config["input-length"])
    return nn.Sequential(
        nn.Conv1d(1, c, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(c, c, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(c, c, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(c * (length // 4), int(config["hidden"])),
        nn.ReLU(),
        nn.Linear(int(config["hidden"]), int(config["num-classes"])),
    )


def initial_model(config: Config) -> nn.Module:
    """The same starting weights on every run with the same seed."""
    torch.manual_seed(int(config["seed"]))
    return build_model(config)


def node_data(config: Config, partition: int, count: int, split: int) -> tuple[torch.Tensor, ...]:
    """``count`` labelled signals of this partition, drawn deterministically from the seed.

    Labels come from one fixed random linear teacher shared by all partitions (so training
    has something to learn); each partition draws its own inputs. ``split`` separates the
    training draw (0) from the evaluation draw (1).
    """
    length, classes = int(config["input-length"]), int(config["num-classes"])
    teacher = np.random.default_rng(int(config["seed"])).standard_normal((length, classes))
    rng = np.random.default_rng([int(config["seed"]), partition, split])
    x = rng.standard_normal((count, length)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=1)
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


def train(model: nn.Module, config: Config, partition: int, round_seed: int) -> dict[str, float]:
    """``local-steps`` SGD steps on minibatches of the partition's training samples."""
    x, y = node_data(config, partition, int(config["samples"]), split=0)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=float(config["lr"]),
        momentum=float(config["momentum"]),
        weight_decay=float(config["weight-decay"]),
    )
    generator = torch.Generator().manual_seed(round_seed)
    batch = int(config["batch-size"])
    started = time.perf_counter()
    model.train()
    loss = torch.zeros(())
    for _ in range(int(config["local-steps"])):
        index = torch.randint(len(x), (batch,), generator=generator)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
    return {"train-s": time.perf_counter() - started, "train-loss": float(loss)}


def evaluate(model: nn.Module, config: Config, partition: int) -> dict[str, float]:
    """Accuracy on the partition's evaluation samples."""
    x, y = node_data(config, partition, int(config["eval-samples"]), split=1)
    started = time.perf_counter()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x).argmax(dim=1) == y).float().mean())
    return {"eval-s": time.perf_counter() - started, "accuracy": accuracy}
