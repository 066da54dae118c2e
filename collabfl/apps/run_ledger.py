"""The ServerApp's one port to its run's coordinator: ``RunLedger``.

What the ServerApp and its pool tell the coordinator about the run (events, the status
line, members, completed rounds) and ask of it (a round's grants, whether an operator
asked it to stop) goes through one typed object bound to the run, not a bag of callbacks:
a test fakes the coordinator once (tests/support/ledger.py), and a new need is a method
here. ``ServiceLedger`` is the real one, over the coordinator service.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from collabfl.coordinator.service_client import CoordinatorClient
from collabfl.coordinator.store.records import Edge, Member
from collabfl.kernel.printable import shown

log = logging.getLogger(__name__)

Grants = Mapping[int, Mapping[int, bytes]]
"""Per fetcher, per owner: the signed token that lets the fetcher fetch the owner's model."""

LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class RunLedger(Protocol):
    """One run's records and questions at its coordinator."""

    @property
    def run_id(self) -> str: ...

    def record_event(
        self,
        kind: str,
        message: str,
        level: str = "warning",
        round: int | None = None,
        client_id: int | None = None,
    ) -> None:
        """A fault or notice of the run (``level``: info, warning or error)."""

    def say(self, message: str) -> None:
        """The run's one-line account of what it does now; "" clears it."""

    def register_members(self, members: Sequence[Member]) -> None:
        """Clients that joined the run, or came back as new Flower nodes."""

    def issue_grants(self, round: int, fetches: Mapping[int, Sequence[int]]) -> Grants:
        """A round's grants in one call: ``fetches`` is fetcher -> owners."""

    def last_completed_round(self) -> int | None:
        """Where a relaunched run resumes after (None: no round completed yet)."""

    def record_round(
        self,
        round: int,
        edges: Iterable[Edge],
        metrics: Mapping[int, Mapping[str, Any]],
        num_clients: int,
        coalitions: Iterable[Iterable[int]] | None,
    ) -> bool:
        """Record a completed round; True when an operator asked the run to stop (the
        answer comes with the write, so a round costs one call)."""

    def stop_requested(self) -> bool:
        """Whether an operator asked the run to stop (asked while the run waits)."""


@dataclass(frozen=True)
class ServiceLedger:
    """``RunLedger`` over the coordinator service; grants live ``grant_ttl_s``. Each event
    is logged at its level too: the ServerApp's log tells what the run's events say (a
    participant's words in them with their control characters written out)."""

    coordinator: CoordinatorClient
    run_id: str
    grant_ttl_s: float

    def record_event(
        self,
        kind: str,
        message: str,
        level: str = "warning",
        round: int | None = None,
        client_id: int | None = None,
    ) -> None:
        where = "".join(
            f" {name} {value}"
            for name, value in (("round", round), ("client", client_id))
            if value is not None
        )
        log.log(LOG_LEVELS.get(level, logging.WARNING), "run %s%s: %s: %s",
                self.run_id, where, kind, shown(message))  # fmt: skip
        self.coordinator.record_event(self.run_id, kind, message, level, round, client_id)

    def say(self, message: str) -> None:
        self.coordinator.set_run_message(self.run_id, message)

    def register_members(self, members: Sequence[Member]) -> None:
        self.coordinator.register_members(members, self.run_id)

    def issue_grants(self, round: int, fetches: Mapping[int, Sequence[int]]) -> Grants:
        return self.coordinator.issue_grants(self.run_id, round, fetches, self.grant_ttl_s)

    def last_completed_round(self) -> int | None:
        return self.coordinator.get_run(self.run_id).last_completed_round

    def record_round(
        self,
        round: int,
        edges: Iterable[Edge],
        metrics: Mapping[int, Mapping[str, Any]],
        num_clients: int,
        coalitions: Iterable[Iterable[int]] | None,
    ) -> bool:
        run = self.coordinator.record_round(
            self.run_id, round, edges, metrics, num_clients=num_clients, coalitions=coalitions
        )
        return run.status == "stopping"

    def stop_requested(self) -> bool:
        return self.coordinator.get_run(self.run_id).status == "stopping"
