"""Signed, expiring fetch grants: "client k may fetch client j's round-t model in run R".

The coordinator decides who collaborates with whom; a serving daemon must not have to ask
it on every fetch. So the coordinator signs a short-lived grant with its Ed25519 key, the
fetcher presents it, and the serving daemon checks it offline with the coordinator's public
key. A grant is bound, not a bearer token: the serving daemon checks that the run, owner
and round are the ones asked for and that the fetcher is the member whose certificate the
caller presented. Tokens are sealed compact JSON (kernel/sealed.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from collabfl.kernel.atomic import write_bytes
from collabfl.kernel.sealed import Clock, expired, seal, unseal

VERSION = 1
MAX_TOKEN_BYTES = 1024
"""Far above a real token (~200 bytes): refuses junk before any decoding work."""

_INT_FIELDS = ("fetcher", "owner", "round")


class InvalidGrant(Exception):
    """The grant does not authorise this fetch; the message says why."""


@dataclass(frozen=True)
class Grant:
    """What a verified token allows."""

    run: str
    fetcher: int
    owner: int
    round: int
    expires_at: float
    """Unix time in seconds after which the grant is void."""


class GrantSigner:
    """Issues grants; lives with the coordinator, which holds the private key."""

    def __init__(self, private_key: Ed25519PrivateKey, clock: Clock = time.time) -> None:
        self._key = private_key
        self._clock = clock

    def issue(self, run: str, fetcher: int, owner: int, round: int, ttl_s: float) -> bytes:
        """A token letting ``fetcher`` fetch ``owner``'s ``round`` model for ``ttl_s`` seconds."""
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        for name, value in zip(_INT_FIELDS, (fetcher, owner, round), strict=True):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        fields = {
            "v": VERSION,
            "run": run,
            "fetcher": fetcher,
            "owner": owner,
            "round": round,
            "exp": self._clock() + ttl_s,
        }
        return seal(self._key, fields)

    def public_key_bytes(self) -> bytes:
        """The raw 32-byte public key that serving daemons verify with."""
        return self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )


class GrantVerifier:
    """Checks grants at a serving daemon, offline, with the coordinator's public key."""

    def __init__(self, public_key_bytes: bytes, clock: Clock = time.time) -> None:
        self._key = Ed25519PublicKey.from_public_bytes(public_key_bytes)
        self._clock = clock

    def verify(
        self, token: bytes, *, run: str, owner: int, round: int, fetcher: int | None
    ) -> Grant:
        """The grant in ``token`` if it is genuine, unexpired and for exactly this fetch.

        ``fetcher`` is the caller's client id as its certificate proves it; None only where
        the link authenticates nobody (insecure loopback mode), so the grant stays a bearer
        token there. Expiry allows ``CLOCK_LEEWAY_S`` for clock skew. Raises InvalidGrant
        whose message says which check failed.
        """
        grant = self._decode(token)
        if reason := expired("grant", grant.expires_at, self._clock):
            raise InvalidGrant(reason)
        if grant.run != run:
            raise InvalidGrant(f"grant is for run {grant.run!r}, not {run!r}")
        if grant.owner != owner:
            raise InvalidGrant(f"grant is for owner {grant.owner}, not {owner}")
        if grant.round != round:
            raise InvalidGrant(f"grant is for round {grant.round}, not {round}")
        if fetcher is not None and grant.fetcher != fetcher:
            raise InvalidGrant(f"grant is for fetcher {grant.fetcher}, not caller {fetcher}")
        return grant

    def _decode(self, token: bytes) -> Grant:
        if not token:
            raise InvalidGrant("no grant presented")
        try:
            return _grant_from(unseal(self._key, token, MAX_TOKEN_BYTES, "token"))
        except ValueError as error:
            raise InvalidGrant(str(error)) from None


def _grant_from(fields: Any) -> Grant:
    """Check the payload's shape strictly: a signed but unexpected payload is still refused."""
    expected = {"v", "run", "fetcher", "owner", "round", "exp"}
    if not isinstance(fields, dict) or set(fields) != expected:
        raise InvalidGrant("malformed: unexpected payload fields")
    if fields["v"] != VERSION:
        raise InvalidGrant(f"malformed: unsupported grant version {fields['v']!r}")
    ints_ok = all(
        isinstance(fields[name], int) and not isinstance(fields[name], bool) for name in _INT_FIELDS
    )
    exp = fields["exp"]
    if not ints_ok or not isinstance(fields["run"], str) or type(exp) not in (int, float):
        raise InvalidGrant("malformed: payload field of the wrong type")
    return Grant(fields["run"], fields["fetcher"], fields["owner"], fields["round"], float(exp))


def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def save_private_key(key: Ed25519PrivateKey, path: Path) -> None:
    """Write the key as unencrypted PKCS#8 PEM readable by its owner only (mode 0600)."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_bytes(path, pem)  # 0600 even if the file existed with wider ones


def load_private_key(path: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


def save_public_key(public_key_bytes: bytes, path: Path) -> None:
    """Write the raw public key as SubjectPublicKeyInfo PEM, the form other tools read."""
    key = Ed25519PublicKey.from_public_bytes(public_key_bytes)
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    write_bytes(path, pem, shared=True)  # whole or nothing: clients may read it meanwhile


def load_public_key_bytes(path: Path) -> bytes:
    """The raw 32-byte key from a PEM file, ready for ``GrantVerifier``."""
    key = serialization.load_pem_public_key(path.read_bytes())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
