"""A ``RunLedger`` (collabfl/apps/run_ledger.py) that keeps what the ServerApp tells it.

It answers as a coordinator would (a token per owner, no stop unless ``stopping``) and
records every call, so a test reads what the run recorded, and how many calls it took.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collabfl.coordinator.store.records import Edge, Member


@dataclass(frozen=True)
class Noted:
    """One ``record_event`` call."""

    kind: str
    message: str
    level: str
    round: int | None
    client_id: int | None


class FakeLedger:
    """Records events, status lines, members, grant calls and rounds of one run."""

    def __init__(self, run_id: str = "r", last_completed: int | None = None) -> None:
        self.run_id = run_id
        self.last_completed = last_completed
        self.events: list[Noted] = []
        self.said: list[str] = []
        self.members: list[list[Member]] = []
        """Each ``register_members`` call's members."""
        self.grant_calls: list[tuple[int, dict[int, list[int]]]] = []
        """Each ``issue_grants`` call: (round, fetcher -> owners)."""
        self.rounds: list[int] = []
        self.stopping = False
        """What ``stop_requested`` and ``record_round`` answer."""
        self.stop_asked = 0

    def record_event(
        self,
        kind: str,
        message: str,
        level: str = "warning",
        round: int | None = None,
        client_id: int | None = None,
    ) -> None:
        self.events.append(Noted(kind, message, level, round, client_id))

    def say(self, message: str) -> None:
        self.said.append(message)

    def register_members(self, members: Sequence[Member]) -> None:
        self.members.append(list(members))

    def issue_grants(
        self, round: int, fetches: Mapping[int, Sequence[int]]
    ) -> dict[int, dict[int, bytes]]:
        self.grant_calls.append((round, {k: list(owners) for k, owners in fetches.items()}))
        return {
            k: {j: f"{k}->{j}@{round}".encode() for j in owners} for k, owners in fetches.items()
        }

    def last_completed_round(self) -> int | None:
        return self.last_completed

    def record_round(
        self,
        round: int,
        edges: Iterable[Edge],
        metrics: Mapping[int, Mapping[str, Any]],
        num_clients: int,
        coalitions: Iterable[Iterable[int]] | None,
    ) -> bool:
        self.rounds.append(round)
        self.last_completed = round
        return self.stopping

    def stop_requested(self) -> bool:
        self.stop_asked += 1
        return self.stopping

    def seen(self) -> list[tuple[int | None, str, int | None]]:
        """The events as (round, kind, client)."""
        return [(e.round, e.kind, e.client_id) for e in self.events]
