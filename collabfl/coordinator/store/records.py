"""What the coordinator records: members, runs, rounds with their graphs and coalitions, and
events. The ServerApp, the CLI and the service client use these types; the store that keeps
them (coordinator/store/state.py) and its file (coordinator/store/database.py) are the daemon's
alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collabfl.kernel.graph_edges import Edge

__all__ = [
    "ACTIVE_STATUSES", "END_STATUSES", "EVENT_LEVELS", "MAX_RUN_MESSAGE", "RUN_STATUSES",
    "Coalitions", "Edge", "Event", "Member", "RoundGraph", "RoundRecord", "RoundWindow", "Run",
]  # fmt: skip

RUN_STATUSES = ("running", "stopping", "stopped", "finished", "failed")
ACTIVE_STATUSES = ("running", "stopping")
END_STATUSES = ("stopped", "finished", "failed")
EVENT_LEVELS = ("info", "warning", "error")
MAX_RUN_MESSAGE = 500
"""A run's status line is one line of text, not a log."""

Coalitions = list[list[int]]
"""Disjoint coalitions: sorted member lists, ordered by first member."""

RoundWindow = tuple[int, int]
"""(keep_last, keep_every): the rounds of a run its records keep (``record_round``)."""


@dataclass(frozen=True)
class Member:
    """One federation participant: its client index and how to reach its daemon."""

    client_id: int
    flower_node_id: int
    peer_address: str
    num_samples: int
    registered_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True)
class Run:
    """A run's identity, config and progress; ``status`` is one of RUN_STATUSES."""

    run_id: str
    method: str
    config: dict[str, Any]
    status: str
    last_completed_round: int | None
    created_at: float
    updated_at: float
    message: str = ""

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True)
class RoundGraph:
    """One round's collaboration graph over clients 0 .. num_clients-1."""

    round: int
    num_clients: int
    edges: list[Edge]


@dataclass(frozen=True)
class RoundRecord:
    """Everything recorded for one round: its graph and each client's metrics."""

    run_id: str
    round: int
    num_clients: int
    edges: list[Edge]
    metrics: dict[int, dict[str, Any]]
    recorded_at: float
    coalitions: Coalitions | None = None
    """None for a method without coalitions (which differs from an empty list)."""


@dataclass(frozen=True)
class Event:
    """A fault or notice worth keeping: a skipped peer, a vanished client, a refused fetch."""

    event_id: int
    run_id: str
    level: str
    kind: str
    message: str
    time: float
    round: int | None = None
    client_id: int | None = None
