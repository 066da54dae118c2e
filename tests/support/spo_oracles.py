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
    """MSE of a linear model whose flat vector is [weights…, bias], on named (x, y) splits.

    The loss is read from each split's sufficient statistics (the Gram matrix of [x, 1],
    its product with y, and y·y, in float64): the same mean of squared residuals, but each
    call costs O(inputs²) rather than O(samples · inputs), so the paper-scale SPO checks
    (20 000 samples a client, a thousand oracle calls) take seconds.
    """
    stats = {name: _gram_statistics(x, y) for name, (x, y) in splits.items()}

    def loss(theta: torch.Tensor, split: str) -> torch.Tensor:
        gram, xy, yy, n = stats[split]
        t = theta.to(torch.float64)
        return (t @ gram @ t - 2 * (xy @ t) + yy) / n

    return loss


def _gram_statistics(
    x: np.ndarray, y: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(AᵀA, Aᵀy, yᵀy, rows) for A = [x, 1], in float64."""
    a = np.c_[x, np.ones(len(x))].astype(np.float64)
    y64 = y.astype(np.float64)
    return (
        torch.from_numpy(a.T @ a),
        torch.from_numpy(a.T @ y64),
        torch.tensor(float(y64 @ y64), dtype=torch.float64),
        len(x),
    )


def linear_regression_oracle(
    clients: Mapping[int, Mapping[str, tuple[np.ndarray, np.ndarray]]],
) -> InMemoryOracle:
    """Clients fitting a linear model (numel = inputs + 1) by MSE on their (x, y) splits."""
    return InMemoryOracle({c: linear_mse_loss(splits) for c, splits in clients.items()})
