"""The coordinator↔client protocol every method is written against.

A method's round protocol is written once, as calls to a ``ClientPool``: send each client an
``Instruction`` (a verb, scalars, optionally one model) and collect ``Reply`` objects. The
in-process runtime answers with direct calls; the Flower runtime turns the same
instructions into Flower Messages. Clients fetch peer models through a separate seam on the
client side, so in DPFL the coordinator only ever sees indices, sizes and metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

Scalar = int | float | str | bool
ConfigValue = Scalar | list[int] | list[float]


class Verb(StrEnum):
    """What a client is asked to do. Each verb is one message in a real federation."""

    TRAIN = "train"
    """Optionally load the attached model into ``slot``, run local SGD, then optionally
    publish the result to the peer store and/or upload it in the reply."""
    COLLABORATE = "collaborate"
    """Fetch candidate peers' published models, pick collaborators (BGGC, GGC or a fixed
    list) and replace ``slot`` with the weighted average of itself and the chosen peers."""
    EVALUATE = "evaluate"
    """Optionally load the attached model into ``slot``; report validation and test metrics
    and the test accuracy of the best-validation model seen so far for that slot."""
    DISCRIMINATE = "discriminate"
    """FedCollab's distance estimation: run local SGD steps on the attached client
    discriminators (one per pair the client is in; fresh ones when no model is attached) and
    report their accuracy on the client's held-out samples before the steps."""
    GRADIENT = "gradient"
    """The equilibrium's SPO search: the mean loss of the attached model on the client's
    ``split`` ("train": a seeded mini-batch, or all of it; "val": all of it) and its gradient
    with respect to the flat weights, sent back as the reply's model. No state changes."""


@dataclass(frozen=True)
class Instruction:
    """One message from the coordinator to one client."""

    verb: Verb
    round: int
    config: Mapping[str, ConfigValue] = field(default_factory=dict)
    model: Any | None = None
    """A flat weight vector sent by the coordinator (FedAvg's global model), or None."""


@dataclass(frozen=True)
class Reply:
    """One client's answer to an instruction."""

    metrics: Mapping[str, ConfigValue]
    model: Any | None = None
    """The client's flat weight vector when it was asked to upload it, else None."""


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
    verb: Verb,
    round_index: int,
    config: Mapping[str, ConfigValue] | None = None,
    model: Any | None = None,
    clients: list[int] | None = None,
) -> dict[int, Reply]:
    """Send the same instruction to every client (or to ``clients``)."""
    targets = sorted(pool.sample_counts) if clients is None else clients
    instruction = Instruction(verb, round_index, dict(config or {}), model)
    return pool.send({k: instruction for k in targets})
