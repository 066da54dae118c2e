"""A model whose floating-point state lives in one contiguous vector.

Federated methods do arithmetic on whole models (averages, differences, running sums).
Keeping parameters and float buffers as views into one flat tensor makes loading a model
a single copy and exporting it a single clone, which is what keeps GGC's reward evaluations
cheap: no per-layer Python loops on the hot path.
"""

from __future__ import annotations

import torch
from torch import nn


class FlatModel:
    """Wraps ``module`` so that ``vector`` is its float state (params then float buffers).

    Integer buffers (BatchNorm's num_batches_tracked) stay per module and are not averaged.
    """

    def __init__(self, module: nn.Module, device: torch.device | str = "cpu") -> None:
        self.module = module.to(device)
        params = list(self.module.parameters())
        buffers = [b for b in self.module.buffers() if b.is_floating_point()]
        self._training: bool | None = None
        """The mode ``set_training`` last gave the module (None: not set yet)."""
        self.num_parameters = sum(p.numel() for p in params)
        self.numel = self.num_parameters + sum(b.numel() for b in buffers)
        self.vector = torch.empty(self.numel, dtype=torch.float32, device=device)
        self.grad = torch.zeros(self.num_parameters, dtype=torch.float32, device=device)
        """Gradients of the parameters (the vector's prefix), also one contiguous tensor."""
        offset = 0
        for tensor in params + buffers:
            n = tensor.numel()
            view = self.vector[offset : offset + n].view_as(tensor)
            view.copy_(tensor.detach())
            tensor.data = view
            if offset < self.num_parameters:
                tensor.grad = self.grad[offset : offset + n].view_as(tensor)
            offset += n

    @property
    def nbytes(self) -> int:
        return self.numel * self.vector.element_size()

    def set_training(self, training: bool) -> None:
        """Put the module in training or evaluation mode, skipping the call when it is already
        there: ``Module.train`` walks every submodule, which GGC's thousands of small
        evaluations per round would pay each time."""
        if self._training is training and self.module.training is training:
            return
        self.module.train(training)
        self._training = training

    def get(self) -> torch.Tensor:
        """A detached copy of the current state."""
        return self.vector.detach().clone()

    def load(self, vector: torch.Tensor) -> None:
        """Overwrite the state with ``vector`` (same length, any device)."""
        if vector.shape != self.vector.shape:
            shape = tuple(vector.shape)
            raise ValueError(f"model vector has shape {shape}, expected ({self.numel},)")
        with torch.no_grad():
            self.vector.copy_(vector)
