"""The local training settings (``training.*``) as a config declares them.

Apart from the loops that use them (kernel/training.py), so that reading and validating a
config imports no torch: a mistyped key is refused in a fraction of a second, not after the
seconds torch takes to import.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from collabfl.kernel.user_code import check_import_path

Amp = Literal["off", "bf16", "fp16"]

BUILTIN_LOSS = "cross_entropy"
BUILTIN_OPTIMIZER = "sgd"


def check_loss_name(name: str) -> str:
    """A config's ``training.loss``: the built-in name or a well-formed import path."""
    return name if name == BUILTIN_LOSS else check_import_path(name)


def check_optimizer_name(name: str) -> str:
    """A config's ``training.optimizer``: the built-in name or a well-formed import path."""
    return name if name == BUILTIN_OPTIMIZER else check_import_path(name)


class TrainingConfig(BaseModel):
    """Local optimiser settings shared by every method."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(0.05, gt=0, le=10, description="SGD learning rate")
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(1e-3, ge=0, le=1)
    batch_size: int = Field(32, ge=1, le=65536)
    eval_batch_size: int = Field(2048, ge=1, description="samples per evaluation forward pass")
    loss: Annotated[str, AfterValidator(check_loss_name)] = Field(
        BUILTIN_LOSS, description="cross_entropy, or pkg.mod:loss (outputs, labels) -> mean loss"
    )
    optimizer: Annotated[str, AfterValidator(check_optimizer_name)] = Field(
        BUILTIN_OPTIMIZER,
        description="sgd (lr, momentum, weight_decay above), or pkg.mod:factory(params)",
    )
    amp: Amp = Field(
        "off", description="mixed precision: off, bf16, or fp16 (CUDA only, loss-scaled)"
    )
    channels_last: bool = Field(False, description="NHWC layout for 4-D (image) inputs")
    loader_workers: int = Field(
        0, ge=0, le=256, description="DataLoader workers reading a streamed split's batches"
    )
