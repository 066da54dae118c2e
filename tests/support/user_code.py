"""User code the Python API and participant tests name by import path
(``tests.support.user_code:...``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def make_net() -> nn.Module:
    """A linear classifier over 40 inputs and 10 classes (MNIST-1D shaped samples)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(40, 10))


def make_adam(params) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=0.01)


def smoothed_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, labels, label_smoothing=0.1)


def not_a_module() -> int:
    return 3


LIST_NOT_CALLABLE = [1, 2]
