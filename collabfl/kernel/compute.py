"""How local training and evaluation use the device: mixed precision, memory layout and
input-loading workers (``training.amp``, ``training.channels_last``,
``training.loader_workers``).

The defaults (no autocast, the inputs' own layout, no workers) run exactly the operations
the loops ran before these settings existed, so results stay bit-identical.

``channels_last`` lays out 4-D inputs as NHWC and leaves the weights as they are: a
FlatModel's weights are views into one contiguous vector (kernel/flat.py), which a layout
change would break. cuDNN and oneDNN pick the NHWC kernels when the input is channels_last,
and convolutions, BatchNorm and ReLU keep that layout downstream.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cache

import torch

from collabfl.kernel.training_config import Amp, TrainingConfig

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@cache  # evaluation asks at every call, GGC thousands of times a round
def amp_problem(amp: Amp, device: torch.device) -> str | None:
    """Why ``device`` cannot run ``amp`` (None when it can): fp16 needs CUDA (its loss
    scaling and fast fp16 kernels are CUDA's), and bf16 a device with bf16 kernels."""
    if amp == "off":
        return None
    if device.type == "cuda":
        if amp == "bf16" and not torch.cuda.is_bf16_supported():
            return f"training.amp=bf16: {torch.cuda.get_device_name(device)} has no bf16"
        return None
    if amp == "fp16":
        return "training.amp=fp16 needs a CUDA device; on the CPU use bf16 or off"
    if device.type != "cpu" or not torch.amp.autocast_mode.is_autocast_available("cpu"):
        return f"training.amp={amp}: no autocast on {device.type} (torch {torch.__version__})"
    return None


@dataclass(frozen=True)
class Compute:
    """The device settings of the training and evaluation loops (see the module docstring)."""

    amp: Amp = "off"
    channels_last: bool = False
    loader_workers: int = 0

    @classmethod
    def of(cls, config: TrainingConfig) -> Compute:
        """The loops' settings a training config names (``amp``, ``channels_last``,
        ``loader_workers``)."""
        return cls(config.amp, config.channels_last, config.loader_workers)

    def check(self, device: torch.device) -> None:
        """ValueError, one line, when ``device`` cannot run these settings."""
        problem = amp_problem(self.amp, device)
        if problem is not None:
            raise ValueError(problem)

    def autocast(self, device: torch.device) -> AbstractContextManager[object]:
        """The forward pass's (and loss's) precision context on ``device``."""
        if self.amp == "off":
            return nullcontext()
        return torch.autocast(device.type, dtype=_DTYPES[self.amp])

    def scaler(self, device: torch.device) -> torch.amp.GradScaler | None:
        """fp16's loss scaler (bf16 has float32's range and needs none)."""
        return torch.amp.GradScaler(device.type) if self.amp == "fp16" else None

    def layout(self, inputs: torch.Tensor) -> torch.Tensor:
        """``inputs`` in the layout the convolutions should run in."""
        if self.channels_last and inputs.dim() == 4:
            return inputs.contiguous(memory_format=torch.channels_last)
        return inputs


PLAIN = Compute()
"""The defaults: what the loops did before these settings existed."""
