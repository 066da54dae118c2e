"""The sub-step relay's state: one session per run, one seat per client, no sockets.

A method's steps within a round (FedCollab's discriminator steps, SPO's gradient queries)
would cost one Flower message each, and a Flower message costs seconds. In a session the
ServerApp hands each client its next step through a seat here and waits for the results;
the client's ClientApp, started once by a Flower message, polls its seat. A poll carries the
result of the step it ran and waits for the next one, so a step costs one round trip per
client on a connection that is already open.

Steps are numbered per seat. A seat keeps its current step until the next replaces it, so a
poll that was lost on the way is simply asked again and gets the same step; a result for
any step but the current one (a late answer after the ServerApp gave up on it) is dropped.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

MIN_TOKEN_BYTES = 16
CLOSED_KEPT = 64
"""Closed sessions remembered per relay, so that a client's late poll hears "closed"."""


class UnknownSession(LookupError):
    """No open or recently closed session of that run has that name."""


class SeatRefused(PermissionError):
    """The poll's client has no seat in the session, or presented the wrong token."""


@dataclass(frozen=True)
class StepResult:
    """What a client answered to one step: its payload, or why it could not run it."""

    payload: bytes = b""
    error: str = ""


@dataclass(frozen=True)
class Work:
    """A poll's answer: the next step (``step`` 0: none yet), or the session's end."""

    step: int = 0
    payload: bytes = b""
    closed: bool = False
    fed_ago_s: float = 0.0
    """Seconds since the ServerApp last handed out or waited on a step of the session."""


MAX_SEATS = 128
"""Clients per session. Every seat can hold one waiting Relay and one waiting Poll, so the
service needs twice this many worker threads (``substep_service.WORKERS``)."""


@dataclass
class _Seat:
    token: bytes
    step: int = 0
    work: bytes = b""
    result: StepResult | None = None
    """The result of ``step``, once it arrived."""
    closed: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)


class SubstepRelay:
    """Sessions of every run, keyed by (run id, session name); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], dict[int, _Seat]] = {}
        self._closed: list[tuple[str, str]] = []
        self._fed_at: dict[tuple[str, str], float] = {}
        """When each open session's ServerApp last handed out or waited on a step."""

    def open(self, run: str, session: str, tokens: Mapping[int, bytes]) -> None:
        """Open ``session`` for ``run``'s clients; any other session of the run ends."""
        short = [k for k, token in tokens.items() if len(token) < MIN_TOKEN_BYTES]
        if short:
            raise ValueError(f"seat tokens need >= {MIN_TOKEN_BYTES} bytes (clients {short})")
        if not 0 < len(tokens) <= MAX_SEATS:
            raise ValueError(f"a session seats 1 to {MAX_SEATS} clients, not {len(tokens)}")
        with self._lock:
            self._close_locked(run)
            self._sessions[(run, session)] = {k: _Seat(bytes(t)) for k, t in tokens.items()}
            self._fed_at[(run, session)] = time.monotonic()

    def close(self, run: str) -> None:
        """End ``run``'s session, if one is open: polls and relays waiting on it return."""
        with self._lock:
            self._close_locked(run)

    def relay(
        self,
        run: str,
        session: str,
        client: int,
        payload: bytes | None,
        step: int,
        timeout_s: float,
    ) -> tuple[int, StepResult | None]:
        """Give ``client`` ``payload`` as its next step (``payload`` None: keep waiting for
        the result of ``step``); return the step and its result, None when none came within
        ``timeout_s``."""
        with self._lock:
            seat = self._sessions.get((run, session), {}).get(client)
            if seat is not None:
                self._fed_at[(run, session)] = time.monotonic()
        if seat is None:
            raise UnknownSession(f"run {run} has no open session {session!r} seating {client}")
        deadline = time.monotonic() + timeout_s
        with seat.changed:
            if payload is not None:
                seat.step, seat.work, seat.result = seat.step + 1, payload, None
                step = seat.step
                seat.changed.notify_all()
            while seat.result is None and not seat.closed and seat.step == step:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                seat.changed.wait(left)
            return step, seat.result if seat.step == step else None

    def poll(
        self,
        run: str,
        session: str,
        client: int,
        token: bytes,
        answered: int,
        result: StepResult | None,
        wait_s: float,
    ) -> Work:
        """Record ``result`` for step ``answered``; wait up to ``wait_s`` for a later step."""
        with self._lock:
            seats = self._sessions.get((run, session))
            if seats is None:
                if (run, session) in self._closed:
                    return Work(closed=True)
                raise UnknownSession(f"run {run} has no session {session!r}")
        seat = seats.get(client)
        if seat is None or not hmac.compare_digest(seat.token, token):
            raise SeatRefused(f"client {client} holds no seat in session {session!r}")
        deadline = time.monotonic() + wait_s
        with seat.changed:
            if result is not None and answered == seat.step and seat.result is None:
                seat.result = result
                seat.changed.notify_all()
            while not seat.closed and seat.step <= answered:
                left = deadline - time.monotonic()
                if left <= 0:
                    with self._lock:
                        fed_at = self._fed_at.get((run, session), time.monotonic())
                    return Work(fed_ago_s=time.monotonic() - fed_at)
                seat.changed.wait(left)
            if seat.closed:
                return Work(closed=True)
            return Work(seat.step, seat.work)

    def _close_locked(self, run: str) -> None:
        for key in [key for key in self._sessions if key[0] == run]:
            self._fed_at.pop(key, None)
            for seat in self._sessions.pop(key).values():
                with seat.changed:
                    seat.closed = True
                    seat.changed.notify_all()
            self._closed = [*self._closed, key][-CLOSED_KEPT:]
