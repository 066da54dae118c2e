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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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


class StepFailed(Exception):
    """A client's step raised: the error, prefixed with the step's verb, so that the
    coordinator can say which step did not happen (a real federation sees only the text)."""

    def __init__(self, verb: Verb, error: BaseException) -> None:
        super().__init__(f"{verb.value} step failed: {type(error).__name__}: {error}")
        self.verb = verb


def failed_verb(text: str) -> Verb | None:
    """The verb a ``StepFailed`` text names (None: the text is some other error)."""
    found = _STEP_FAILED.search(text)
    return None if found is None else Verb(found.group(1))


_STEP_FAILED = re.compile(rf"\b({'|'.join(v.value for v in Verb)}) step failed: ")


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


Program = Sequence[Instruction]
"""One client's instructions for one round, run in order (DPFL's train, collaborate and
evaluate): a real federation delivers them as one message."""


@runtime_checkable
class ProgramPool(Protocol):
    """A pool that delivers a client's whole program at once."""

    def send_programs(self, programs: Mapping[int, Program]) -> dict[int, list[Reply]]:
        """Run each client's program; a client that fails any step is absent."""
        ...


def run_programs(pool: ClientPool, programs: Mapping[int, Program]) -> list[dict[int, Reply]]:
    """Run every client's program; return each step's replies (step i: ``result[i]``).

    A ``ProgramPool`` runs each program as one unit, so its clients go through their steps
    without waiting for each other (a step that needs a peer's model of this round waits for
    that peer to publish it). Any other pool runs step i of every client before step i+1.
    Both give the same replies, because a step reads other clients' models only as published
    by earlier steps. A client that fails a step takes no further steps of the round.
    """
    lengths = {len(program) for program in programs.values()}
    if len(lengths) > 1:
        raise ValueError(f"programs of one round must have the same length, got {lengths}")
    steps = lengths.pop() if lengths else 0
    if isinstance(pool, ProgramPool):
        answered = pool.send_programs(programs)
        return [{k: replies[i] for k, replies in answered.items()} for i in range(steps)]
    by_step: list[dict[int, Reply]] = []
    alive = sorted(programs)
    for i in range(steps):
        replies = pool.send({k: programs[k][i] for k in alive})
        alive = [k for k in alive if k in replies]
        by_step.append(replies)
    return by_step
