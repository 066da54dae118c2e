"""FedCollab's client discriminator, batched over every pair a client takes part in, and a
client's side of the DISCRIMINATE verb (strategies.distances has the coordinator's side).

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
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from collabfl.client.randomness import batch_generator
from collabfl.kernel.devices import place
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.samples import Samples
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import FlatVector, Reply
from collabfl.strategies.verbs import Discriminate, Features


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


def official_label_scale(num_classes: int) -> float:
    """The official FedCollab discriminator's weight on the one-hot label: it scales the
    one-hot by L/√(L−1) (to match the features' scale) and doubles the label branch's output
    (labels matter more than features). Both are linear, so with the branches' first layers
    merged into ours the same function multiplies the one-hot by 2·L/√(L−1)."""
    if num_classes < 2:
        raise ValueError(f"label scaling needs at least 2 classes, got {num_classes}")
    return 2 * num_classes / math.sqrt(num_classes - 1)


def labelled_features(
    x: torch.Tensor, y: torch.Tensor, num_classes: int, label_scale: float = 1.0
) -> torch.Tensor:
    """The discriminator's input: flattened features with the one-hot label (times
    ``label_scale``) appended.

    With the label as an input, label, feature and concept shift all change the joint
    distribution the discriminator sees.
    """
    flat = x.reshape(x.shape[0], -1).to(torch.float32)
    onehot = functional.one_hot(y, num_classes).to(flat.dtype) * label_scale
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


@dataclass(frozen=True)
class DiscriminatorData:
    """A client's discriminator inputs (features with one-hot labels): train and held-out."""

    train: torch.Tensor
    held_out: torch.Tensor


class ClientDiscriminators:
    """Runs DISCRIMINATE tasks for one client: its ``train`` and ``val`` splits, the shared
    ``workspace`` and the shared ``initial_model`` (the frozen feature extractor)."""

    def __init__(
        self,
        client_id: int,
        seed: int,
        train: Samples,
        val: Samples,
        workspace: FlatModel,
        initial_model: torch.Tensor,
    ) -> None:
        self.client_id = client_id
        self.seed = seed
        self.train = train
        self.val = val
        self.workspace = workspace
        self.initial_model = initial_model
        self._inputs: dict[tuple[Features, int, bool], DiscriminatorData] = {}

    def step(
        self, round_index: int, task: Discriminate, model: FlatVector | None, batch_size: int
    ) -> Reply:
        """Report the held-out accuracy of the received discriminators (fresh ones when
        ``model`` is None), then return them after the task's local SGD steps.
        ``batch_size``: samples per forward pass when extracting features."""
        data = self._discriminator_inputs(task, batch_size)
        device = data.train.device
        targets = torch.tensor([float(t) for t in task.targets], device=device)
        in_dim = data.train.shape[1]
        peers = task.peers
        if model is None:
            fresh = [self._fresh_discriminator(j, in_dim, task.hidden) for j in peers]
            weights = place(torch.stack(fresh), device)
        else:
            expected = len(peers) * discriminator_numel(in_dim, task.hidden)
            if model.numel() != expected:
                raise ValueError(
                    f"expected {len(peers)} discriminators of {in_dim} inputs "
                    f"({expected} values), got shape {tuple(model.shape)}"
                )
            weights = place(model.view(len(peers), -1), device)
        held_out = accuracies(weights, data.held_out, targets, task.hidden)
        label = f"discriminate:{task.step}"
        generator = batch_generator(self.seed, self.client_id, round_index, label)
        batch = min(task.batch_size, data.train.shape[0])
        for _ in range(task.local_steps):
            rows = torch.randperm(data.train.shape[0], generator=generator)[:batch]
            weights = sgd_step(weights, data.train[rows], targets, task.lr, task.hidden)
        metrics = ClientMetrics(
            disc_acc=tuple(float(a) for a in held_out),
            disc_held_out=int(data.held_out.shape[0]),
        )
        return Reply(metrics, weights.reshape(-1))

    def _discriminator_inputs(self, task: Discriminate, batch_size: int) -> DiscriminatorData:
        """Train and held-out discriminator inputs, built once per (features, samples, label
        scaling).

        The first ``samples`` of a seeded shuffle of the train split train the discriminator
        (FedCollab uses the same count on every client); the rest of it and the validation
        split are held out.
        """
        features, samples = task.features, task.samples
        key = (features, samples, task.scale_label)
        if key not in self._inputs:
            train, val = self.train, self.val
            if not 1 <= samples < len(train):
                raise ValueError(
                    f"client {self.client_id} has {len(train)} train samples; "
                    f"cannot train a discriminator on {samples} and hold out the rest"
                )
            shuffle = batch_generator(self.seed, self.client_id, 0, "discriminator")
            order = torch.randperm(len(train), generator=shuffle).to(train.y.device)
            x = torch.cat([train.inputs(order), val.inputs(slice(None))])
            y = torch.cat([train.y[order], val.y])
            self.workspace.load(self.initial_model)
            with torch.no_grad():
                num_classes = int(self.workspace.module(x[:1]).shape[-1])
            if features == "initial_model":
                x = penultimate_features(self.workspace.module, x, batch_size)
            scale = official_label_scale(num_classes) if task.scale_label else 1.0
            inputs = labelled_features(x, y, num_classes, scale)
            self._inputs[key] = DiscriminatorData(inputs[:samples], inputs[samples:])
        return self._inputs[key]

    def _fresh_discriminator(self, peer: int, in_dim: int, hidden: int) -> torch.Tensor:
        """Both clients of a pair derive the same initial weights from (seed, pair)."""
        first, second = sorted((self.client_id, peer))
        state = np.random.SeedSequence([self.seed, first, second, 7]).generate_state(2)
        generator = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
        return initial_discriminator(in_dim, hidden, generator)
