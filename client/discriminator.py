"""FedCollab's client discriminator, batched over every pair a client takes part in.

A discriminator is a 2-layer MLP (hidden width H, ReLU, one logit) that reads a sample's
features with its one-hot label appended and predicts which of two clients the sample came
from. Each client of a pair trains it on its own data with a constant target (1 for the pair's
first client, 0 for the second) and the coordinator averages the two copies, so no sample
leaves a client. A client is in N − 1 pairs at once; keeping their discriminators as rows of
one (P, numel) matrix makes one SGD step for all of them a pair of batched matmuls.

Flat layout of one row: W1 (D × H, row-major), b1 (H), w2 (H), b2 (1).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional


def discriminator_numel(in_dim: int, hidden: int) -> int:
    """Parameters of one discriminator on ``in_dim`` input features."""
    return in_dim * hidden + 2 * hidden + 1


def input_dim(numel: int, hidden: int) -> int:
    """The input width a flat discriminator of ``numel`` values was built for."""
    in_dim, remainder = divmod(numel - 2 * hidden - 1, hidden)
    if remainder or in_dim < 1:
        raise ValueError(f"{numel} values are not a discriminator with hidden width {hidden}")
    return in_dim


def initial_discriminator(in_dim: int, hidden: int, generator: torch.Generator) -> torch.Tensor:
    """A fresh flat discriminator, uniform in ±1/sqrt(fan_in) like ``nn.Linear``'s default.

    Both clients of a pair draw it from the same seed, so they start from the same weights.
    """
    first = 1.0 / math.sqrt(in_dim)
    second = 1.0 / math.sqrt(hidden)
    parts = [
        (torch.rand(in_dim * hidden + hidden, generator=generator) * 2 - 1) * first,
        (torch.rand(hidden + 1, generator=generator) * 2 - 1) * second,
    ]
    return torch.cat(parts)


def _logits(weights: torch.Tensor, features: torch.Tensor, hidden: int) -> torch.Tensor:
    """(P, B) logits of P discriminators (rows of ``weights``) on B samples."""
    pairs = weights.shape[0]
    in_dim = features.shape[1]
    split = in_dim * hidden
    w1 = weights[:, :split].view(pairs, in_dim, hidden)
    b1 = weights[:, split : split + hidden]
    w2 = weights[:, split + hidden : split + 2 * hidden]
    b2 = weights[:, -1]
    activations = torch.relu(torch.matmul(features, w1) + b1[:, None, :])  # (P, B, H)
    return torch.matmul(activations, w2[:, :, None])[:, :, 0] + b2[:, None]


def sgd_step(
    weights: torch.Tensor, features: torch.Tensor, targets: torch.Tensor, lr: float, hidden: int
) -> torch.Tensor:
    """One SGD step of every discriminator on the batch ``features`` (targets: one per row).

    Each row's loss is the mean binary cross-entropy over the batch; rows do not interact, so
    summing the row losses gives each row its own gradient.
    """
    trainable = weights.detach().requires_grad_(True)
    logits = _logits(trainable, features, hidden)
    expected = targets[:, None].expand_as(logits)
    loss = functional.binary_cross_entropy_with_logits(logits, expected, reduction="none")
    (gradient,) = torch.autograd.grad(loss.mean(dim=1).sum(), trainable)
    return (trainable - lr * gradient).detach()


@torch.no_grad()
def accuracies(
    weights: torch.Tensor, features: torch.Tensor, targets: torch.Tensor, hidden: int
) -> torch.Tensor:
    """Per discriminator, the share of ``features`` it assigns to the target class."""
    predicted = (_logits(weights, features, hidden) > 0).to(targets.dtype)
    return (predicted == targets[:, None]).to(torch.float32).mean(dim=1)


def labelled_features(x: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The discriminator's input: flattened features with the one-hot label appended.

    With the label as an input, label, feature and concept shift all change the joint
    distribution the discriminator sees.
    """
    flat = x.reshape(x.shape[0], -1).to(torch.float32)
    onehot = functional.one_hot(y, num_classes).to(flat.dtype)
    return torch.cat([flat, onehot], dim=1)


@torch.no_grad()
def penultimate_features(module: nn.Module, x: torch.Tensor, batch_size: int) -> torch.Tensor:
    """What ``module``'s last linear layer receives: a frozen feature extractor's output.

    Used for image inputs so the discriminator reads a compact embedding instead of pixels.
    """
    last = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if not last:
        raise ValueError("the model has no linear layer to take features from")
    captured: list[torch.Tensor] = []
    hook = last[-1].register_forward_hook(lambda _m, inputs, _o: captured.append(inputs[0]))
    try:
        was_training = module.training
        module.eval()
        for start in range(0, x.shape[0], batch_size):
            module(x[start : start + batch_size])
        module.train(was_training)
    finally:
        hook.remove()
    return torch.cat(captured).reshape(x.shape[0], -1)
