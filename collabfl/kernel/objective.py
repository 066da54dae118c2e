"""What local training minimises and how it steps: the loss and the optimiser.

The default is cross-entropy and the flat fused SGD of kernel/training.py (configured by
``TrainingConfig``). A user may bring a loss and a ``torch.optim`` optimiser factory instead,
as Python callables (collabfl.api) or as import paths in the config (``training.loss``,
``training.optimizer``), which a participant resolves only under its own allow-list.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from collabfl.kernel.training_config import BUILTIN_LOSS, BUILTIN_OPTIMIZER
from collabfl.kernel.user_code import UserCodeError, load_object

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(model outputs, integer labels) → the mean loss over the batch, like F.cross_entropy."""

OptimizerFactory = Callable[[Iterable[nn.Parameter]], Optimizer | tuple[Optimizer, LRScheduler]]
"""The model's parameters → a fresh optimiser, or an optimiser with an LR schedule stepped
after every optimiser step. Called at the start of every local training call."""


@dataclass(frozen=True)
class Objective:
    """The loss every client trains and evaluates with, and its optimiser (None: the built-in
    SGD, whose lr, momentum and weight decay come from ``TrainingConfig``; a factory's
    optimiser carries its own)."""

    loss: LossFn = F.cross_entropy
    optimizer: OptimizerFactory | None = None

    def summed_loss(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss summed over the batch, for evaluations that add batches up (the built-in
        loss sums directly, so its figures stay exactly what they were)."""
        if self.loss is F.cross_entropy:
            return F.cross_entropy(outputs, labels, reduction="sum")
        return self.loss(outputs, labels) * len(labels)


DEFAULT_OBJECTIVE = Objective()


def objective_from_names(
    loss: str, optimizer: str, allowed: Collection[str] | None = None
) -> Objective:
    """The objective a config names, its import paths resolved under ``allowed``."""
    loss_fn = F.cross_entropy if loss == BUILTIN_LOSS else _callable(loss, "loss", allowed)
    factory = None
    if optimizer != BUILTIN_OPTIMIZER:
        factory = _callable(optimizer, "optimizer", allowed)
    return Objective(loss_fn, factory)


def _callable(path: str, role: str, allowed: Collection[str] | None) -> Callable[..., Any]:
    target = load_object(path, allowed)
    if not callable(target):
        raise UserCodeError(f"{role} {path!r} is not callable")
    return target


def make_optimizer(
    factory: OptimizerFactory, parameters: Iterable[nn.Parameter]
) -> tuple[Optimizer, LRScheduler | None]:
    """The factory's optimiser and schedule, checked, so a wrong factory fails by name."""
    made = factory(parameters)
    optimizer, schedule = made if isinstance(made, tuple) else (made, None)
    if not isinstance(optimizer, Optimizer):
        kind = type(optimizer).__name__
        raise UserCodeError(
            f"the optimizer factory returned a {kind} object, not a torch.optim.Optimizer"
        )
    if schedule is not None and not isinstance(schedule, LRScheduler):
        kind = type(schedule).__name__
        raise UserCodeError(
            f"the optimizer factory's schedule is a {kind} object, not an LRScheduler"
        )
    return optimizer, schedule
