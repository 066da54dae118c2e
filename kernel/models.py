"""The model zoo: one small network per supported dataset."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def mnist1d_cnn(num_classes: int = 10, length: int = 40) -> nn.Module:
    """A small 1-D CNN for MNIST-1D (about 95% test accuracy when trained centrally)."""
    return nn.Sequential(
        nn.Conv1d(1, 32, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(32, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(32, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * (length // 4), 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def cifar_cnn(num_classes: int = 10) -> nn.Module:
    """The DPFL paper's CNN for 32×32×3 images (LeNet-5 shaped)."""
    return nn.Sequential(
        nn.Conv2d(3, 6, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def femnist_cnn(num_classes: int = 62) -> nn.Module:
    """The LEAF benchmark's CNN for 28×28 FEMNIST characters."""
    return nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 2048),
        nn.ReLU(),
        nn.Linear(2048, num_classes),
    )


MODELS: dict[str, Callable[[int], nn.Module]] = {
    "mnist1d_cnn": mnist1d_cnn,
    "cifar_cnn": cifar_cnn,
    "femnist_cnn": femnist_cnn,
}

DEFAULT_MODEL = {
    "mnist1d": "mnist1d_cnn",
    "cifar10": "cifar_cnn",
    "cinic10": "cifar_cnn",
    "femnist": "femnist_cnn",
}


def build_model(name: str, num_classes: int, seed: int) -> nn.Module:
    """Build ``name`` with weights drawn from ``seed``: every client gets the same start."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODELS[name](num_classes)


def head_parameters(module: nn.Module, layers: int = 2) -> int:
    """Parameters of the last ``layers`` fully connected layers (pFedGraph's "final layers").

    They sit at the end of the parameter vector, since every model here ends in its head.
    """
    linear = [m for m in module.modules() if isinstance(m, nn.Linear)][-layers:]
    return sum(p.numel() for m in linear for p in m.parameters())
