"""A client's side of SPO's loss oracle: the GRADIENT verb (strategies.spo_federated).

The coordinator sends a target model; the client answers with its mean loss (its
objective's, cross-entropy by default) on one split and the gradient with respect to the flat
weights. Nothing of the client's state changes, and the data never leaves it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from collabfl.client.randomness import batch_generator
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.objective import DEFAULT_OBJECTIVE, Objective
from collabfl.kernel.samples import Samples
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import FlatVector, Reply
from collabfl.strategies.verbs import Gradient, Split


class GradientOracle:
    """Answers GRADIENT tasks on one client's ``splits`` with the shared ``workspace``."""

    def __init__(
        self,
        client_id: int,
        seed: int,
        splits: Mapping[Split, Samples],
        workspace: FlatModel,
        objective: Objective = DEFAULT_OBJECTIVE,
    ) -> None:
        self.client_id = client_id
        self.seed = seed
        self.splits = splits
        self.workspace = workspace
        self.objective = objective

    def answer(self, round_index: int, task: Gradient, model: FlatVector, chunk: int) -> Reply:
        """Mean loss of ``model`` on the task's split and its flat gradient (computed
        ``chunk`` samples at a time).

        Float buffers have no gradient; their entries are zero (no model in the zoo has any).
        """
        data = self.splits[task.split]
        if len(data) == 0:
            raise ValueError(f"client {self.client_id} has no {task.split} samples")
        self.workspace.load(model)
        rows = torch.arange(len(data), device=data.y.device)
        if task.split == "train" and 0 < task.batch_size < len(data):
            label = f"gradient:{task.step}"
            generator = batch_generator(self.seed, self.client_id, round_index, label)
            rows = torch.randperm(len(data), generator=generator)[: task.batch_size]
            rows = rows.to(data.y.device)
        module = self.workspace.module
        module.train(task.split == "train")
        self.workspace.grad.zero_()
        total = torch.zeros((), device=data.y.device)
        for start in range(0, len(rows), chunk):
            index = rows[start : start + chunk]
            loss = self.objective.summed_loss(module(data.inputs(index)), data.y[index])
            (loss / len(rows)).backward()
            total += loss.detach()
        gradient = torch.zeros_like(self.workspace.vector)
        gradient[: self.workspace.num_parameters] = self.workspace.grad
        metrics = ClientMetrics(loss=float(total) / len(rows), samples=len(rows))
        return Reply(metrics, gradient)
