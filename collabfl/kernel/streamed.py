"""A split whose inputs stay in the user's Dataset and are read a batch at a time.

Stacking a split into one tensor (kernel/training.py's ``TensorData``) is fastest, but it
needs every client's inputs in memory at once, and a Dataset's transforms then apply once.
A ``StreamedData`` keeps only the labels (training needs their count and classes up front)
and reads the inputs of each batch from the Dataset when a step asks for them, so the
transforms apply at every read, as a DataLoader would apply them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

Index = torch.Tensor | slice
"""Which samples of a split: a tensor of positions or a slice."""


@dataclass(frozen=True)
class StreamedData:
    """Samples ``rows`` of ``dataset``; labels ``y`` on ``device``, inputs read on demand."""

    dataset: Dataset[Any]
    rows: torch.Tensor
    """The dataset's item numbers, in this split's order (int64, on the CPU)."""
    y: torch.Tensor
    input_shape: tuple[int, ...]
    device: torch.device

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def inputs(self, index: Index) -> torch.Tensor:
        """The float32 inputs at ``index``, read from the dataset now, on ``device``."""
        chosen = self.rows[index.cpu() if isinstance(index, torch.Tensor) else index]
        items = [self._read(int(row)) for row in chosen]
        if not items:
            return torch.empty((0, *self.input_shape), device=self.device)
        batch = torch.stack(items)
        if self.device.type == "cuda":  # page-locked, so the copy to the GPU runs async
            return batch.pin_memory().to(self.device, non_blocking=True)
        return batch.to(self.device)

    def subset(self, index: torch.Tensor) -> StreamedData:
        """The samples at ``index``, still streamed."""
        return replace(self, rows=self.rows[index.cpu()], y=self.y[index])

    def on(self, device: torch.device) -> StreamedData:
        """The same split with its labels, and the inputs it reads, on ``device``."""
        return replace(self, y=self.y.to(device), device=device)

    def _read(self, row: int) -> torch.Tensor:
        value = self.dataset[row][0]
        x = torch.as_tensor(value if torch.is_tensor(value) else np.asarray(value))
        if tuple(x.shape) != self.input_shape:
            raise ValueError(
                f"item {row} of a streamed Dataset has an input of shape {tuple(x.shape)}, "
                f"not {self.input_shape} as when it was loaded"
            )
        return x.to(torch.float32)
