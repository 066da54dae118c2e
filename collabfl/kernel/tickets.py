"""Run tickets: "the coordinator launched collabfl run R; valid until T".

Anyone who can reach a SuperLink's Control API can submit a ServerApp, and Flower sends
that ServerApp's messages to every SuperNode. A client must therefore tell the
coordinator's runs from anyone else's: the coordinator signs a ticket for each launch with
the same Ed25519 key that signs fetch grants (clients already hold its public half), puts
it in the Flower run config, and the ClientApp serves a run's messages only when its
ticket verifies offline. Tokens are sealed like grants (kernel/sealed.py) and carry a
``kind`` field, so a grant never passes as a ticket.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from collabfl.kernel.sealed import Clock, expired, seal, unseal

VERSION = 1
KIND = "run-ticket"
MAX_TICKET_BYTES = 1024
"""Far above a real ticket (~250 bytes): refuses junk before any decoding work."""


class InvalidTicket(Exception):
    """The ticket does not authorise this run; the message says why."""


@dataclass(frozen=True)
class Ticket:
    """What a verified ticket allows: serving collabfl run ``run`` until ``expires_at``."""

    run: str
    expires_at: float


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
        fields = {"v": VERSION, "kind": KIND, "run": run, "exp": self._clock() + ttl_s}
        return seal(self._key, fields).decode()


class TicketVerifier:
    """Checks tickets in the ClientApp, offline, with the coordinator's public key."""

    def __init__(self, public_key_bytes: bytes, clock: Clock = time.time) -> None:
        self._key = Ed25519PublicKey.from_public_bytes(public_key_bytes)
        self._clock = clock

    def verify(self, token: str, *, run: str) -> Ticket:
        """The ticket in ``token`` if it is genuine, unexpired and for collabfl run ``run``.

        Expiry allows ``CLOCK_LEEWAY_S`` for clock skew. Raises InvalidTicket whose message
        says which check failed.
        """
        ticket = self._decode(token)
        if reason := expired("ticket", ticket.expires_at, self._clock):
            raise InvalidTicket(reason)
        if ticket.run != run:
            raise InvalidTicket(f"ticket is for run {ticket.run!r}, not {run!r}")
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
    if not isinstance(fields, dict) or set(fields) != {"v", "kind", "run", "exp"}:
        raise InvalidTicket("malformed: not a run ticket")
    if fields["v"] != VERSION or fields["kind"] != KIND:
        raise InvalidTicket(f"malformed: unsupported ticket {fields['kind']!r} v{fields['v']!r}")
    if not isinstance(fields["run"], str) or type(fields["exp"]) not in (int, float):
        raise InvalidTicket("malformed: payload field of the wrong type")
    return Ticket(fields["run"], float(fields["exp"]))
