"""SPO's loss oracle over in-memory loss functions, and linear-regression clients for it.

``strategies.spo`` only ever asks a ``LossOracle``; in a federation the client pool answers
(strategies/spo_federated.py). This oracle answers from local differentiable loss functions
instead, which is what the SPO tests and the synthetic-regression benchmark need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from collabfl.strategies.spo import SPLITS, Split

LossFn = Callable[[torch.Tensor, Split], torch.Tensor]
"""A client's mean loss of a flat model vector on its "train" or "val" split (differentiable)."""


class InMemoryOracle:
    """A LossOracle over local loss functions (autograd for the gradients); counts calls."""

    def __init__(self, losses: Mapping[int, LossFn]) -> None:
        self.losses = dict(losses)
        self.calls = 0

    def loss_and_grad(
        self, models: Mapping[int, torch.Tensor], split: Split
    ) -> dict[int, tuple[float, torch.Tensor]]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        unknown = set(models) - set(self.losses)
        if unknown:
            raise KeyError(f"no loss function for clients {sorted(unknown)}")
        self.calls += 1
        reply = {}
        for client, flat in models.items():
            theta = flat.detach().clone().requires_grad_(True)
            loss = self.losses[client](theta, split)
            (grad,) = torch.autograd.grad(loss, theta)
            reply[client] = (float(loss.detach()), grad)
        return reply


def linear_mse_loss(splits: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> LossFn:
    """MSE of a linear model whose flat vector is [weights…, bias], on named (x, y) splits."""
    tensors = {
        name: (torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32))
        for name, (x, y) in splits.items()
    }

    def loss(theta: torch.Tensor, split: str) -> torch.Tensor:
        x, y = tensors[split]
        return torch.mean((x @ theta[:-1] + theta[-1] - y) ** 2)

    return loss


def linear_regression_oracle(
    clients: Mapping[int, Mapping[str, tuple[np.ndarray, np.ndarray]]],
) -> InMemoryOracle:
    """Clients fitting a linear model (numel = inputs + 1) by MSE on their (x, y) splits."""
    return InMemoryOracle({c: linear_mse_loss(splits) for c, splits in clients.items()})
