"""The sub-step relay's state: one session per run, one seat per client, no sockets.

A method's steps within a round (FedCollab's discriminator steps, SPO's gradient queries)
would cost one Flower message each, and a Flower message costs seconds. In a session the
ServerApp hands every client its next step in one call here and waits for all the results;
each client's ClientApp, started once by a Flower message, polls its seat. A poll carries the
result of the step it ran and waits for the next one, so a step costs one round trip per
client on a connection that is already open, and one call for the ServerApp.

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
    """No open or recently closed session of that run has that name (or seats that client)."""


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


@dataclass(frozen=True)
class Relayed:
    """What one relay call came back with."""

    steps: dict[int, int]
    """Client -> the step handed out or waited on."""
    results: dict[int, StepResult]
    """Client -> the result of that step, for the clients that answered (within the byte
    budget: the others' results wait for the next call)."""


MAX_SEATS = 128
"""Clients per session. Every seat can hold one waiting poll, so the service needs this
many worker threads and a few for relay calls (``substep_service.WORKERS``)."""


@dataclass
class _Seat:
    token: bytes
    ready: threading.Condition
    """Signalled when the seat gets a new step or its session closes."""
    step: int = 0
    work: bytes = b""
    result: StepResult | None = None
    """The result of ``step``, once it arrived."""


@dataclass
class _Session:
    seats: dict[int, _Seat]
    lock: threading.Lock
    answered: threading.Condition
    """Signalled when any seat posts a result or the session closes."""
    fed_at: float = field(default_factory=time.monotonic)
    """When the ServerApp last handed out or waited on a step."""
    closed: bool = False

    @classmethod
    def seating(cls, tokens: Mapping[int, bytes]) -> _Session:
        lock = threading.Lock()
        seats = {k: _Seat(bytes(t), threading.Condition(lock)) for k, t in tokens.items()}
        return cls(seats, lock, threading.Condition(lock))

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.answered.notify_all()
            for seat in self.seats.values():
                seat.ready.notify_all()


class SubstepRelay:
    """Sessions of every run, keyed by (run id, session name); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._closed: list[tuple[str, str]] = []

    def open(self, run: str, session: str, tokens: Mapping[int, bytes]) -> None:
        """Open ``session`` for ``run``'s clients; any other session of the run ends."""
        short = [k for k, token in tokens.items() if len(token) < MIN_TOKEN_BYTES]
        if short:
            raise ValueError(f"seat tokens need >= {MIN_TOKEN_BYTES} bytes (clients {short})")
        if not 0 < len(tokens) <= MAX_SEATS:
            raise ValueError(f"a session seats 1 to {MAX_SEATS} clients, not {len(tokens)}")
        with self._lock:
            self._close_locked(run)
            self._sessions[(run, session)] = _Session.seating(tokens)

    def close(self, run: str) -> None:
        """End ``run``'s session, if one is open: polls and relays waiting on it return."""
        with self._lock:
            self._close_locked(run)

    def relay(
        self,
        run: str,
        session: str,
        work: Mapping[int, bytes],
        awaiting: Mapping[int, int],
        timeout_s: float,
        max_bytes: int,
    ) -> Relayed:
        """Give each client in ``work`` its next step, then wait up to ``timeout_s`` until
        those and the steps in ``awaiting`` (client -> step handed out earlier) are answered
        or replaced. Results are returned up to ``max_bytes`` of payload (at least one)."""
        with self._lock:
            opened = self._sessions.get((run, session))
        strangers = (set(work) | set(awaiting)) - set(opened.seats if opened else ())
        if opened is None or strangers:
            raise UnknownSession(f"run {run} has no open session {session!r} seating {strangers}")
        deadline = time.monotonic() + timeout_s
        with opened.lock:
            opened.fed_at = time.monotonic()
            steps = dict(awaiting)
            for client, payload in work.items():
                seat = opened.seats[client]
                seat.step, seat.work, seat.result = seat.step + 1, payload, None
                steps[client] = seat.step
                seat.ready.notify_all()
            while not opened.closed:
                settled = [
                    k for k, step in steps.items()
                    if opened.seats[k].step != step or opened.seats[k].result is not None
                ]  # fmt: skip
                left = deadline - time.monotonic()
                if len(settled) == len(steps) or left <= 0:
                    break
                opened.answered.wait(left)
            return Relayed(steps, _within(opened.seats, steps, max_bytes))

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
            opened = self._sessions.get((run, session))
            if opened is None:
                if (run, session) in self._closed:
                    return Work(closed=True)
                raise UnknownSession(f"run {run} has no session {session!r}")
        seat = opened.seats.get(client)
        if seat is None or not hmac.compare_digest(seat.token, token):
            raise SeatRefused(f"client {client} holds no seat in session {session!r}")
        deadline = time.monotonic() + wait_s
        with opened.lock:
            if result is not None and answered == seat.step and seat.result is None:
                seat.result = result
                opened.answered.notify_all()
            while not opened.closed and seat.step <= answered:
                left = deadline - time.monotonic()
                if left <= 0:
                    return Work(fed_ago_s=time.monotonic() - opened.fed_at)
                seat.ready.wait(left)
            if opened.closed:
                return Work(closed=True)
            return Work(seat.step, seat.work)

    def _close_locked(self, run: str) -> None:
        for key in [key for key in self._sessions if key[0] == run]:
            self._sessions.pop(key).close()
            self._closed = [*self._closed, key][-CLOSED_KEPT:]


def _within(
    seats: Mapping[int, _Seat], steps: Mapping[int, int], max_bytes: int
) -> dict[int, StepResult]:
    """The answered steps' results, in client order, up to ``max_bytes`` (at least one)."""
    results: dict[int, StepResult] = {}
    size = 0
    for client in sorted(steps):
        seat = seats[client]
        if seat.step != steps[client] or seat.result is None:
            continue
        size += len(seat.result.payload) + len(seat.result.error)
        if results and size > max_bytes:
            break
        results[client] = seat.result
    return results
