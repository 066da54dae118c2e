"""The validation losses of several models in one pass: GGC's look-ahead rewards on a GPU.

A GGC step needs two rewards; looking one step ahead, six models cover two steps (four of
them the two possible outcomes of the first step's draw). On a GPU the six run faster as one
``torch.func.vmap`` over stacked parameter vectors than as four separate evaluations
(``benchmarks/ggc_batching.py``: 0.54-0.62x the time per model on an H200); on the CPU they
run slower (2.1-2.6x), so the search uses this only where ``dpfl.batched_rewards`` says so.
Batched losses agree with ``kernel.training.evaluate``'s to float rounding, not bit for bit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch.func import functional_call, vmap

from collabfl.kernel.compute import PLAIN, Compute
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.loader import batch_inputs
from collabfl.kernel.objective import DEFAULT_OBJECTIVE, Objective
from collabfl.kernel.samples import Samples
from collabfl.kernel.streamed import Index

__all__ = ["CandidateModels", "stacked_views"]

log = logging.getLogger(__name__)


def stacked_views(flat: FlatModel, vectors: torch.Tensor) -> dict[str, torch.Tensor]:
    """``vectors`` (K rows, each a flat model) as ``functional_call``'s dict of (K, *shape)
    tensors, in FlatModel's layout: the parameters, then the float buffers."""
    named = list(flat.module.named_parameters()) + [
        (name, b) for name, b in flat.module.named_buffers() if b.is_floating_point()
    ]
    views, offset = {}, 0
    for name, tensor in named:
        n = tensor.numel()
        views[name] = vectors[:, offset : offset + n].reshape(-1, *tensor.shape)
        offset += n
    return views


class CandidateModels:
    """``capacity`` model-sized rows on the workspace's device, which a search writes its
    candidate averages into, and their mean losses on ``data``, read in one call
    (strategies.greedy.LookAhead).

    The rows are one (capacity, numel) tensor: the search holds capacity - 1 models more than
    the sequential path's single workspace while it exists. The data is split so that rows x
    samples per forward pass stay within ``batch_size`` samples, the activation memory of one
    sequential evaluation. A model (or loss) that ``vmap`` cannot run is told once in the log
    and evaluated one row at a time by ``fallback`` from then on.
    """

    def __init__(
        self,
        flat: FlatModel,
        data: Samples,
        capacity: int,
        batch_size: int,
        objective: Objective = DEFAULT_OBJECTIVE,
        compute: Compute = PLAIN,
        fallback: Callable[[torch.Tensor], float] | None = None,
    ) -> None:
        self.flat = flat
        self.data = data
        self.stack = torch.empty(
            capacity, flat.numel, dtype=flat.vector.dtype, device=flat.vector.device
        )
        self.rows = list(self.stack)
        self.batch_size = batch_size
        self.objective = objective
        self.compute = compute
        self.fallback = fallback
        self.batched = True
        """False once ``vmap`` failed on this model: ``fallback`` evaluates each row."""

        def summed_loss(
            params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
        ) -> torch.Tensor:
            return objective.summed_loss(functional_call(flat.module, params, (x,)), y)

        self._summed_losses = vmap(summed_loss, in_dims=(0, None, None))

    def losses(self, count: int) -> list[float]:
        """The mean loss on the data of each of the first ``count`` rows."""
        if self.batched:
            try:
                return self._batched_losses(count)
            except (RuntimeError, NotImplementedError) as error:
                if self.fallback is None:
                    raise
                self.batched = False
                log.warning(
                    "dpfl.batched_rewards: %s cannot be evaluated under torch.func.vmap (%s); "
                    "GGC's rewards are read one model at a time",
                    type(self.flat.module).__name__,
                    str(error).splitlines()[0] if str(error) else type(error).__name__,
                )
        assert self.fallback is not None
        return [self.fallback(row) for row in self.rows[:count]]

    @torch.inference_mode()
    def _batched_losses(self, count: int) -> list[float]:
        data, device = self.data, self.data.y.device
        self.compute.check(device)
        self.flat.set_training(False)
        params = stacked_views(self.flat, self.stack[:count])
        per_pass = max(1, self.batch_size // count)
        plan: list[tuple[Index, Index]] = [
            (slice(start, start + per_pass),) * 2 for start in range(0, len(data), per_pass)
        ]
        totals = torch.zeros(count, device=device)
        inputs = batch_inputs(data, plan, self.compute.loader_workers)
        for (rows, _), x in zip(plan, inputs, strict=True):
            with self.compute.autocast(device):
                totals += self._summed_losses(params, self.compute.layout(x), data.y[rows]).float()
        return [float(v) / len(data) for v in totals.cpu()]
