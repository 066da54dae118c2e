"""The coordinator↔client protocol every method is written against.

A method's round protocol is written once, as calls to a ``ClientPool``: send each client an
``Instruction`` (a round, a typed task from strategies.verbs, optionally one model) and
collect ``Reply`` objects (typed metrics from strategies.metrics, optionally one model). The
in-process runtime answers with direct calls; the Flower runtime turns the same
instructions into Flower Messages (strategies.wire is their one encoding). Clients fetch
peer models through a separate seam on the client side, so in DPFL the coordinator only ever
sees indices, sizes and metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch

from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.verbs import Task, Verb

FlatVector = torch.Tensor
"""A model (or a gradient, or stacked discriminators) as one 1-D float32 tensor: the only
model type that crosses the seam. Methods that compute in NumPy convert at their own boundary
(``as_array``, ``as_vector``)."""


def check_vector(vector: FlatVector | None, what: str) -> None:
    """Refuse anything but a 1-D float32 tensor (or None) where a flat vector belongs."""
    if vector is None:
        return
    if not isinstance(vector, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(vector).__name__}")
    if vector.ndim != 1 or vector.dtype != torch.float32:
        raise ValueError(f"{what} must be 1-D float32, got {vector.dtype} {tuple(vector.shape)}")


def as_array(vector: FlatVector) -> npt.NDArray[np.float64]:
    """A flat vector as a float64 NumPy array on the CPU (for methods that compute in NumPy)."""
    return vector.detach().to("cpu", torch.float64).numpy()


def as_vector(array: npt.ArrayLike) -> FlatVector:
    """A NumPy result as a flat vector (float32, CPU)."""
    return torch.as_tensor(np.asarray(array, dtype=np.float32).reshape(-1))


@dataclass(frozen=True)
class Instruction:
    """One message from the coordinator to one client: do ``task`` in ``round``."""

    round: int
    task: Task
    model: FlatVector | None = None
    """A vector sent by the coordinator (FedAvg's global model, a pFedGraph aggregate, the
    discriminators of a DISCRIMINATE, the model a GRADIENT differentiates), or None."""

    def __post_init__(self) -> None:
        check_vector(self.model, f"the model of a {self.verb} instruction")
        if self.verb is Verb.GRADIENT and self.model is None:
            raise ValueError("a gradient instruction must carry the model to differentiate")

    @property
    def verb(self) -> Verb:
        """The message type: the task's verb."""
        return self.task.verb


@dataclass(frozen=True)
class Reply:
    """One client's answer to an instruction."""

    metrics: ClientMetrics = field(default_factory=ClientMetrics)
    model: FlatVector | None = None
    """The client's vector when its task returns one (an upload, discriminators, a
    gradient), else None."""

    def __post_init__(self) -> None:
        check_vector(self.model, "a reply's model")


class ClientPool(Protocol):
    """The coordinator's view of the federation: who is there and how to talk to them."""

    @property
    def sample_counts(self) -> Mapping[int, int]:
        """Training samples per client id (reported at registration)."""
        ...

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        """Deliver one instruction per client and wait for the replies.

        Clients that fail or vanish are absent from the result; the round goes on without
        them.
        """
        ...


def broadcast(
    pool: ClientPool,
    round_index: int,
    task: Task,
    model: FlatVector | None = None,
    clients: list[int] | None = None,
) -> dict[int, Reply]:
    """Send the same instruction to every client (or to ``clients``)."""
    targets = sorted(pool.sample_counts) if clients is None else clients
    instruction = Instruction(round_index, task, model)
    return pool.send({k: instruction for k in targets})
