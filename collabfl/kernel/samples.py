"""A client's data split as the loops read it: labels held on the device, inputs by index
(already on the device, or streamed from a Dataset by kernel/streamed.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from collabfl.kernel.streamed import Index, StreamedData

__all__ = ["Samples", "TensorData"]


@dataclass(frozen=True)
class TensorData:
    """One split of a client's data, already on the compute device."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def inputs(self, index: Index) -> torch.Tensor:
        """The inputs at ``index`` (a streamed split reads them from its Dataset instead)."""
        return self.x[index]

    def subset(self, index: torch.Tensor) -> TensorData:
        """The samples at ``index``."""
        return TensorData(self.x[index], self.y[index])


Samples = TensorData | StreamedData
"""A split as training and evaluation read it: labels held, inputs by index."""
