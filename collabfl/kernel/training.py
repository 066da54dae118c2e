"""Local SGD and evaluation on a FlatModel, tuned for many small clients.

The optimiser works on the flat parameter vector directly (one fused update per step, the
same arithmetic as torch.optim.SGD without dampening or Nesterov), so per-step framework
overhead stays flat as the model grows in layers. A user's optimiser (kernel/objective.py)
steps the same parameters instead: they are views into the flat vector, so what it writes is
the model the methods average. Mixed precision, the inputs' layout and loader workers
(``training.amp``, ``channels_last``, ``loader_workers``) are kernel/compute.py's and
kernel/loader.py's; at their defaults the loops run the operations they always ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from itertools import tee

import torch

from collabfl.kernel.compute import PLAIN, Compute
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.loader import Batch, batch_inputs
from collabfl.kernel.objective import DEFAULT_OBJECTIVE, Objective, make_optimizer
from collabfl.kernel.samples import Samples
from collabfl.kernel.streamed import Index
from collabfl.kernel.training_config import TrainingConfig


def steps_for(epochs: float, num_samples: int, batch_size: int) -> int:
    """Number of SGD steps that make ``epochs`` passes (at least one step)."""
    per_epoch = math.ceil(num_samples / batch_size)
    return max(1, round(epochs * per_epoch))


def train(
    model: FlatModel,
    data: Samples,
    epochs: float,
    config: TrainingConfig,
    generator: torch.Generator,
    prox_mu: float = 0.0,
    prox_ref: torch.Tensor | None = None,
    align_lam: float = 0.0,
    align_to: torch.Tensor | None = None,
    steps: int | None = None,
    objective: Objective = DEFAULT_OBJECTIVE,
    scaler: torch.amp.GradScaler | None = None,
) -> float:
    """Run local SGD in place on ``model``; return the mean training loss.

    ``scaler``: fp16's loss scaler carried over from the caller's earlier calls (None: a
    fresh one, at 2^16, which skips steps that overflow until its scale has come down).

    ``steps`` (when given) replaces ``epochs`` by an exact number of SGD steps, the way
    pFedGraph's official code counts local work.

    With ``prox_mu > 0`` the gradient gets the proximal term mu·(w − prox_ref) (FedProx,
    Ditto's personal objective). With ``align_lam > 0`` the objective gets
    −(λ/2)⟨w/‖w‖, align_to⟩ (pFedGraph's regulariser; pass a unit vector for the cosine
    variant).

    ``objective`` gives the loss and, when it has one, the optimiser that steps instead of
    the built-in SGD (the proximal and alignment terms are in the gradient it sees).
    """
    if len(data) == 0:
        raise ValueError("cannot train on an empty dataset")
    if prox_mu > 0 and prox_ref is None:
        raise ValueError("prox_mu > 0 needs a reference model")
    if align_lam > 0 and align_to is None:
        raise ValueError("align_lam > 0 needs a direction to align to")
    if steps is None:
        steps = steps_for(epochs, len(data), config.batch_size)
    elif steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    n_params = model.num_parameters
    weights = model.vector[:n_params]
    grad = model.grad
    # None when the term is off (the checks above guarantee a tensor when it is on).
    reference = (
        prox_ref[:n_params].to(weights.device) if prox_mu > 0 and prox_ref is not None else None
    )
    direction = (
        align_to[:n_params].to(weights.device) if align_lam > 0 and align_to is not None else None
    )
    compute, device = Compute.of(config), weights.device
    compute.check(device)
    update = _update_rule(model, config, objective)
    if scaler is None:
        scaler = compute.scaler(device)
    scaled = _ScaledStep(model, update, scaler) if scaler is not None else None
    model.set_training(True)
    total_loss = torch.zeros((), device=device)
    # Two readers of one lazy plan: the loop (labels) and the inputs, read ahead by workers.
    plan, ahead = tee(batch_plan(len(data), steps, config.batch_size, generator, data.y.device))
    inputs = batch_inputs(data, ahead, compute.loader_workers)
    for step, ((_, index), x) in enumerate(zip(plan, inputs, strict=True)):
        grad.zero_()
        with compute.autocast(device):
            loss = objective.loss(model.module(compute.layout(x)), data.y[index])
        if scaled is None:
            loss.backward()
        else:
            scaled.backward(loss)
        with torch.no_grad():
            if reference is not None:
                grad.add_(weights - reference, alpha=prox_mu)
            if direction is not None:
                grad.add_(alignment_gradient(weights, direction), alpha=-align_lam / 2)
        if scaled is None:
            update(step)
        else:
            scaled.advance()
        total_loss += loss.detach()
    return float(total_loss) / steps


def batch_plan(
    num_samples: int, steps: int, batch_size: int, generator: torch.Generator, device: torch.device
) -> Iterator[Batch]:
    """Each step's batch: a fresh permutation every epoch, drawn on the CPU and copied to
    ``device`` once per epoch (not per step), and sliced both places."""
    order = on_device = torch.empty(0, dtype=torch.long)
    position = 0
    for _ in range(steps):
        if position >= len(order):
            order = torch.randperm(num_samples, generator=generator)
            on_device = order.to(device)
            position = 0
        rows = slice(position, position + batch_size)
        yield order[rows], on_device[rows]
        position += batch_size


class _ScaledStep(torch.optim.Optimizer):
    """The update rule as the Optimizer fp16's GradScaler steps: the scaler unscales, and
    checks for overflow, the gradients of an Optimizer's parameters (here views into
    ``model.grad``), and skips the step where they overflowed."""

    def __init__(
        self, model: FlatModel, update: Callable[[int], None], scaler: torch.amp.GradScaler
    ) -> None:
        super().__init__(list(model.module.parameters()), {})
        self.update, self.scaler = update, scaler
        self.taken = 0

    def backward(self, loss: torch.Tensor) -> None:
        """Gradients of the scaled loss, unscaled at once: the proximal and alignment terms
        are added to the true gradient."""
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self)

    def advance(self) -> None:
        """The update, unless the gradient overflowed; then the scale for the next step."""
        self.scaler.step(self)
        self.scaler.update()

    def step(self, closure: None = None) -> None:  # type: ignore[override]
        self.update(self.taken)
        self.taken += 1


def _update_rule(
    model: FlatModel, config: TrainingConfig, objective: Objective
) -> Callable[[int], None]:
    """One optimiser step from the gradient in ``model.grad``, given the step's index."""
    weights, grad = model.vector[: model.num_parameters], model.grad
    if objective.optimizer is not None:
        optimizer, schedule = make_optimizer(objective.optimizer, model.module.parameters())

        def user_step(step: int) -> None:
            optimizer.step()
            if schedule is not None:
                schedule.step()

        return user_step
    velocity = torch.zeros_like(weights)

    @torch.no_grad()
    def sgd_step(step: int) -> None:
        if config.weight_decay > 0:
            grad.add_(weights, alpha=config.weight_decay)
        if config.momentum > 0:
            velocity.mul_(config.momentum if step else 0.0).add_(grad)
            weights.sub_(velocity, alpha=config.lr)
        else:
            weights.sub_(grad, alpha=config.lr)

    return sgd_step


def alignment_gradient(weights: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """∇_w ⟨w/‖w‖, d⟩ = (d − (w·d / ‖w‖²) w) / ‖w‖ (zero at w = 0).

    The zero case is selected on the device: reading the norm on the host would wait for
    the GPU at every pFedGraph step."""
    norm = weights.norm()
    nonzero = norm != 0
    safe = torch.where(nonzero, norm, 1.0)
    gradient = (direction - (weights @ direction) / safe**2 * weights) / safe
    return torch.where(nonzero, gradient, 0.0)


@torch.inference_mode()  # lighter than no_grad: no version counters on what it makes
def evaluate(
    model: FlatModel,
    data: Samples,
    batch_size: int = 2048,
    objective: Objective = DEFAULT_OBJECTIVE,
    accuracy: bool = True,
    compute: Compute = PLAIN,
) -> tuple[float, float]:
    """Mean loss (the objective's) and accuracy of the model's current state on ``data``.

    ``accuracy=False`` skips counting correct predictions (the accuracy is then nan): GGC's
    reward evaluations need only the loss, which is the same number either way.
    """
    if len(data) == 0:
        return float("nan"), float("nan")
    device = data.y.device
    compute.check(device)
    model.set_training(False)
    if len(data) <= batch_size:  # one batch (GGC's rewards): no running sums to allocate
        with compute.autocast(device):
            logits = model.module(compute.layout(data.inputs(slice(None))))
            # + 0.0: the sum as the running sum below gives it (0 + -0.0 is +0.0).
            loss = float(objective.summed_loss(logits, data.y)) + 0.0
        correct = int((logits.argmax(dim=1) == data.y).sum()) if accuracy else 0
        return loss / len(data), correct / len(data) if accuracy else float("nan")
    loss_sum = torch.zeros((), device=device)
    correct_sum = torch.zeros((), device=device, dtype=torch.long)
    plan = [(rows, rows) for rows in _slices(len(data), batch_size)]
    for (rows, _), x in zip(plan, batch_inputs(data, plan, compute.loader_workers), strict=True):
        y = data.y[rows]
        with compute.autocast(device):
            logits = model.module(compute.layout(x))
            loss_sum += objective.summed_loss(logits, y)
        if accuracy:
            correct_sum += (logits.argmax(dim=1) == y).sum()
    accuracy_value = float(correct_sum) / len(data) if accuracy else float("nan")
    return float(loss_sum) / len(data), accuracy_value


def _slices(num_samples: int, batch_size: int) -> list[Index]:
    return [slice(start, start + batch_size) for start in range(0, num_samples, batch_size)]
