"""When the ServerApp's messages can be delivered and its replies pulled, without a clock.

Pushing messages, the ServerApp says so (``pushed``): the coordinator's Fleet gateway then
asks the SuperLink again for every SuperNode pull it holds. Waiting for replies, it waits
until the gateway has seen a SuperNode push one (``await_replies``), then pulls; without
it, it would ask the SuperLink ten times a second. Both go through the coordinator service
(coordinator/gateway/doorbell.py holds the daemon's side). ``Polling`` is the clock these replace,
kept for grids with no coordinator behind them (tests' in-memory grids) and as the fallback
when a signal cannot be sent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from collabfl.coordinator.service_client import (
    CoordinatorClient,
    CoordinatorError,
    CoordinatorUnreachable,
)

log = logging.getLogger(__name__)

REPLY_WAIT_S = 1.0
"""The longest one wait for a reply signal: a lost signal costs a round at most this."""


class FleetSignals(Protocol):
    def pushed(self) -> int:
        """Messages were pushed to SuperNodes; returns the count of replies pushed so far
        (what a wait for this push's replies has already seen)."""

    def await_replies(self, seen: int, timeout_s: float) -> int:
        """The count of replies pushed, once above ``seen`` or after ``timeout_s``."""


@dataclass(frozen=True)
class Polling:
    """No signals: look for replies every ``every_s``."""

    every_s: float = 0.1

    def pushed(self) -> int:
        return 0

    def await_replies(self, seen: int, timeout_s: float) -> int:
        time.sleep(max(0.0, min(self.every_s, timeout_s)))
        return seen + 1  # look again


POLLING = Polling()
"""The default where no coordinator signals (tests' in-memory grids)."""


class CoordinatorSignals:
    """Signals through the coordinator service; a call that fails falls back to polling."""

    def __init__(self, coordinator: CoordinatorClient, run_id: str) -> None:
        self.coordinator = coordinator
        self.run_id = run_id
        self.fallback = POLLING

    def pushed(self) -> int:
        try:
            return self.coordinator.messages_pushed(self.run_id)
        except (CoordinatorUnreachable, CoordinatorError) as error:
            log.warning("could not signal pushed messages (delivery waits a little): %s", error)
            return 0

    def await_replies(self, seen: int, timeout_s: float) -> int:
        wait = max(0.0, min(REPLY_WAIT_S, timeout_s))
        try:
            return self.coordinator.await_replies(self.run_id, seen, wait)
        except (CoordinatorUnreachable, CoordinatorError) as error:
            log.warning("could not wait for a reply signal; polling instead: %s", error)
            return self.fallback.await_replies(seen, timeout_s)
