"""Signed compact tokens: ``base64url(payload) "." base64url(Ed25519 signature)``.

Grants and run tickets are both the coordinator's word, checked offline by whoever holds
its public key. The payload is key-sorted compact JSON: easy to inspect, nothing
executable, and the signature covers the exact bytes that are parsed. What the fields
mean, and which ones a token must have, is each token kind's business.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

Clock = Callable[[], float]
"""Unix time in seconds; signers and verifiers take one, so tests can shift a side's."""
CLOCK_LEEWAY_S = 300.0
"""How far a participant's clock may be off the coordinator's: a token is honoured until this
long after its expiry by the checker's clock (docs/security.md states it)."""


def expired(noun: str, expires_at: float, clock: Clock = time.time) -> str | None:
    """Why a token expiring at ``expires_at`` is void now, naming the clock; None if valid."""
    late = clock() - expires_at
    if late < CLOCK_LEEWAY_S:
        return None
    return (
        f"{noun} expired {late:.0f} s ago by this machine's clock, beyond the "
        f"{CLOCK_LEEWAY_S:.0f} s allowed for clock skew: a replay, or this machine's clock "
        "runs ahead of the coordinator's (`collabfl doctor` shows by how much)"
    )


def seal(key: Ed25519PrivateKey, fields: dict[str, Any]) -> bytes:
    """The token carrying ``fields``, signed with ``key``."""
    payload = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    return _b64encode(payload) + b"." + _b64encode(key.sign(payload))


def unseal(key: Ed25519PublicKey, token: bytes, max_bytes: int, noun: str) -> Any:
    """The JSON value a genuine token carries; ValueError saying what is wrong otherwise.

    ``max_bytes`` refuses junk before any decoding work; ``noun`` names the token in errors.
    """
    if len(token) > max_bytes:
        raise ValueError(f"malformed: {noun} of {len(token)} bytes is too long")
    parts = token.split(b".")
    if len(parts) != 2:
        raise ValueError("malformed: expected payload.signature")
    try:
        payload, signature = (_b64decode(part) for part in parts)
    except binascii.Error:
        raise ValueError("malformed: not base64url") from None
    try:
        key.verify(signature, payload)
    except InvalidSignature:
        raise ValueError("bad signature (not issued by this coordinator)") from None
    try:
        return json.loads(payload)
    except ValueError:
        raise ValueError("malformed: signed payload is not JSON") from None


def _b64encode(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def _b64decode(data: bytes) -> bytes:
    """Strict base64url without padding: any other character is an error."""
    return base64.b64decode(data + b"=" * (-len(data) % 4), altchars=b"-_", validate=True)
