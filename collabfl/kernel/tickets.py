"""Run tickets: "the coordinator launched collabfl run R; valid until T".

Anyone who can reach a SuperLink's Control API can submit a ServerApp, and Flower sends
that ServerApp's messages to every SuperNode. A client must therefore tell the
coordinator's runs from anyone else's: the coordinator signs a ticket for each launch with
the same Ed25519 key that signs fetch grants (clients already hold its public half), puts
it in the Flower run config, and the ClientApp serves a run's messages only when its
ticket verifies offline. Tokens are sealed like grants (kernel/sealed.py) and carry a
``kind`` field, so a grant never passes as a ticket.

A ticket lives as long as its run, and ``--run-ticket-ttl`` at most: it carries the time the
coordinator issued it, the coordinator publishes each ended run's end time (``RunEnd``) with
its revoked certificates, and a ticket issued before its run's latest end is refused. Both
times are read from the coordinator's clock, so participants' clocks play no part. A run
that resumes gets a new ticket; the old ones stay dead.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from collabfl.kernel.atomic import write_text
from collabfl.kernel.sealed import Clock, expired, seal, unseal

VERSION = 2
"""2: with ``iat``, the issue time compared with the run's end."""
KIND = "run-ticket"
MAX_TICKET_BYTES = 1024
"""Far above a real ticket (~250 bytes): refuses junk before any decoding work."""


class InvalidTicket(Exception):
    """The ticket does not authorise this run; the message says why."""


@dataclass(frozen=True)
class Ticket:
    """What a verified ticket allows: serving collabfl run ``run`` until ``expires_at``, or
    until the run ends if sooner."""

    run: str
    expires_at: float
    issued_at: float


@dataclass(frozen=True)
class RunEnd:
    """How and when (coordinator clock) a run last ended."""

    status: str
    ended_at: float


MAX_RUN_ENDS = 5_000
"""The most ends published (the latest; far above the runs a federation ends within one
ticket lifetime): about 100 bytes each, they stay within the poller's 1 MiB read."""
MAX_RUN_ENDS_BYTES = 1 << 20


def run_key(run: str) -> str:
    """How a run is named in the published ends: its id's SHA-256, so that whoever reaches
    the coordinator's public port learns no run names, while a participant looks up the run
    its ticket names."""
    return hashlib.sha256(run.encode()).hexdigest()


def published_run_ends(ends: Mapping[str, RunEnd]) -> dict[str, list[Any]]:
    """The JSON the coordinator publishes for ``ends`` (by run id), keyed by ``run_key``."""
    return _as_json({run_key(run): end for run, end in ends.items()})


def _as_json(ends: Mapping[str, RunEnd]) -> dict[str, list[Any]]:
    return {key: [end.status, end.ended_at] for key, end in ends.items()}


def run_ends_from_json(fields: Any) -> dict[str, RunEnd]:
    """Parse the coordinator's published ends (keyed by ``run_key``) strictly; ValueError
    on anything else."""
    if not isinstance(fields, dict) or len(fields) > MAX_RUN_ENDS:
        raise ValueError(f"ended runs: not an object of at most {MAX_RUN_ENDS} runs")
    ends = {}
    for run, value in fields.items():
        if not (
            isinstance(value, list)
            and len(value) == 2
            and isinstance(value[0], str)
            and type(value[1]) in (int, float)
        ):
            raise ValueError(f"ended runs: run {run!r} has no [status, time]")
        ends[run] = RunEnd(value[0], float(value[1]))
    return ends


def save_run_ends(path: Path, ends: Mapping[str, RunEnd]) -> None:
    """Keep the coordinator's published ends (keyed by ``run_key``) where this participant's
    ClientApp reads them."""
    write_text(path, json.dumps(_as_json(ends)))


def load_run_ends(path: Path) -> dict[str, RunEnd]:
    """The ends saved at ``path``; none while it does not exist yet (the daemon has not
    reached the coordinator: tickets then live their TTL). A damaged file is InvalidTicket:
    refusing every run is safer than serving ended ones."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RUN_ENDS_BYTES + 1)
    except FileNotFoundError:
        return {}
    try:
        if len(raw) > MAX_RUN_ENDS_BYTES:
            raise ValueError(f"over {MAX_RUN_ENDS_BYTES} bytes")
        return run_ends_from_json(json.loads(raw))
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidTicket(f"the ended runs in {path} are unreadable ({error})") from None


class TicketSigner:
    """Issues tickets; lives with the coordinator, which holds the private key."""

    def __init__(self, private_key: Ed25519PrivateKey, clock: Clock = time.time) -> None:
        self._key = private_key
        self._clock = clock

    def issue(self, run: str, ttl_s: float) -> str:
        """A ticket letting clients serve collabfl run ``run`` for ``ttl_s`` seconds."""
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        if not run:
            raise ValueError("a ticket names a run")
        now = self._clock()
        fields = {"v": VERSION, "kind": KIND, "run": run, "iat": now, "exp": now + ttl_s}
        return seal(self._key, fields).decode()


class TicketVerifier:
    """Checks tickets in the ClientApp, offline, with the coordinator's public key."""

    def __init__(self, public_key_bytes: bytes, clock: Clock = time.time) -> None:
        self._key = Ed25519PublicKey.from_public_bytes(public_key_bytes)
        self._clock = clock

    def verify(self, token: str, *, run: str, ended: Mapping[str, RunEnd] | None = None) -> Ticket:
        """The ticket in ``token`` if it is genuine, unexpired, for collabfl run ``run`` and
        issued after that run last ended (``ended``: the coordinator's published ends, keyed
        by ``run_key``).

        Expiry allows ``CLOCK_LEEWAY_S`` for clock skew. Raises InvalidTicket whose message
        says which check failed.
        """
        ticket = self._decode(token)
        if reason := expired("ticket", ticket.expires_at, self._clock):
            raise InvalidTicket(reason)
        if ticket.run != run:
            raise InvalidTicket(f"ticket is for run {ticket.run!r}, not {run!r}")
        end = (ended or {}).get(run_key(run))
        if end is not None and ticket.issued_at <= end.ended_at:
            raise InvalidTicket(
                f"run {run!r} has ended ({end.status} at {_utc(end.ended_at)}); its ticket "
                f"(issued {_utc(ticket.issued_at)}) ended with it"
            )
        return ticket

    def _decode(self, token: str) -> Ticket:
        if not token:
            raise InvalidTicket("the run carries no ticket")
        raw = token.encode("ascii", errors="replace")
        try:
            return _ticket_from(unseal(self._key, raw, MAX_TICKET_BYTES, "ticket"))
        except ValueError as error:
            raise InvalidTicket(str(error)) from None


def _ticket_from(fields: Any) -> Ticket:
    """Check the payload's shape strictly: a signed grant or other payload is refused."""
    if not isinstance(fields, dict) or not {"v", "kind"} <= set(fields):
        raise InvalidTicket("malformed: not a run ticket")
    if fields["v"] != VERSION or fields["kind"] != KIND:
        raise InvalidTicket(f"malformed: unsupported ticket {fields['kind']!r} v{fields['v']!r}")
    if set(fields) != {"v", "kind", "run", "iat", "exp"}:
        raise InvalidTicket("malformed: not a run ticket")
    times = (fields["iat"], fields["exp"])
    if not isinstance(fields["run"], str) or any(type(t) not in (int, float) for t in times):
        raise InvalidTicket("malformed: payload field of the wrong type")
    return Ticket(fields["run"], float(fields["exp"]), float(fields["iat"]))


def _utc(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))
