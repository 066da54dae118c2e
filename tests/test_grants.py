"""Fetch grants: genuine ones pass, and every way a grant can be wrong is named."""

from __future__ import annotations

import base64
import json
import stat
import time

import pytest

from collabfl.kernel.grants import (
    GrantSigner,
    GrantVerifier,
    InvalidGrant,
    generate_private_key,
    load_private_key,
    load_public_key_bytes,
    save_private_key,
    save_public_key,
)
from collabfl.kernel.sealed import CLOCK_LEEWAY_S


@pytest.fixture
def signer() -> GrantSigner:
    return GrantSigner(generate_private_key())


@pytest.fixture
def verifier(signer) -> GrantVerifier:
    return GrantVerifier(signer.public_key_bytes())


def b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def test_genuine_grant_verifies(signer, verifier):
    token = signer.issue("run-a", fetcher=3, owner=5, round=2, ttl_s=60)
    grant = verifier.verify(token, run="run-a", owner=5, round=2, fetcher=3)
    assert (grant.run, grant.fetcher, grant.owner, grant.round) == ("run-a", 3, 5, 2)
    assert time.time() < grant.expires_at <= time.time() + 60
    payload = base64.urlsafe_b64decode(token.split(b".")[0] + b"==")
    assert json.loads(payload)["fetcher"] == 3  # readable JSON, nothing executable


@pytest.mark.parametrize(
    ("owner", "round", "later_s", "reason"),
    [
        (6, 2, 0, "for owner 5, not 6"),
        (5, 3, 0, "for round 2, not 3"),
        (5, 2, 60 + CLOCK_LEEWAY_S + 1, "expired"),
    ],
    ids=["wrong-owner", "wrong-round", "expired"],
)
def test_mismatched_grant_is_refused(signer, verifier, owner, round, later_s, reason):
    token = signer.issue("run-a", fetcher=3, owner=5, round=2, ttl_s=60)
    checker = GrantVerifier(signer.public_key_bytes(), clock=lambda: time.time() + later_s)
    with pytest.raises(InvalidGrant, match=reason):
        checker.verify(token, run="run-a", owner=owner, round=round, fetcher=3)


def test_grant_signed_by_another_key_is_refused(verifier):
    forged = GrantSigner(generate_private_key()).issue("run-a", 3, 5, 2, ttl_s=60)
    with pytest.raises(InvalidGrant, match="bad signature"):
        verifier.verify(forged, run="run-a", owner=5, round=2, fetcher=3)


def test_tampered_payload_is_refused(signer, verifier):
    payload, signature = signer.issue("run-a", 3, 5, 2, ttl_s=60).split(b".")
    fields = json.loads(base64.urlsafe_b64decode(payload + b"=="))
    fields["fetcher"] = 4
    tampered = b64(json.dumps(fields).encode()) + b"." + signature
    with pytest.raises(InvalidGrant, match="bad signature"):
        verifier.verify(tampered, run="run-a", owner=5, round=2, fetcher=3)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"", "no grant"),
        (b"abc", "malformed: expected payload.signature"),
        (b"a.b.c", "malformed: expected payload.signature"),
        (b"***.***", "malformed: not base64url"),
        (b"x" * 5000, "too long"),
    ],
    ids=["empty", "no-dot", "two-dots", "not-base64", "huge"],
)
def test_malformed_token_is_refused(verifier, token, reason):
    with pytest.raises(InvalidGrant, match=reason):
        verifier.verify(token, run="run-a", owner=5, round=2, fetcher=3)


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        b'{"v":1,"run":"r","fetcher":3,"owner":5,"round":2}',
        b'{"v":1,"run":"r","fetcher":3,"owner":true,"round":2,"exp":9e99}',
        b'{"v":2,"run":"r","fetcher":3,"owner":5,"round":2,"exp":9e99}',
    ],
    ids=["not-json", "not-object", "missing-exp", "bool-owner", "version"],
)
def test_signed_but_unexpected_payload_is_refused(payload):
    key = generate_private_key()
    verifier = GrantVerifier(GrantSigner(key).public_key_bytes())
    token = b64(payload) + b"." + b64(key.sign(payload))
    with pytest.raises(InvalidGrant, match="malformed"):
        verifier.verify(token, run="run-a", owner=5, round=2, fetcher=3)


def test_issue_rejects_nonsense(signer):
    with pytest.raises(ValueError, match="ttl_s"):
        signer.issue("run-a", 3, 5, 2, ttl_s=0)
    with pytest.raises(ValueError, match="owner"):
        signer.issue("run-a", 3, -1, 2, ttl_s=5)


def test_keys_round_trip_through_pem_files(tmp_path):
    key = generate_private_key()
    private, public = tmp_path / "grant.key", tmp_path / "grant.pub"
    private.write_bytes(b"old")
    private.chmod(0o644)
    save_private_key(key, private)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    loaded = GrantSigner(load_private_key(private))
    save_public_key(loaded.public_key_bytes(), public)
    verifier = GrantVerifier(load_public_key_bytes(public))
    token = GrantSigner(key).issue("run-a", 1, 2, 3, ttl_s=5)
    assert verifier.verify(token, run="run-a", owner=2, round=3, fetcher=1).fetcher == 1


@pytest.mark.parametrize(
    ("run", "fetcher", "reason"),
    [("run-b", 3, "for run 'run-a', not 'run-b'"), ("run-a", 4, "for fetcher 3, not caller 4")],
    ids=["other-run", "other-fetcher"],
)
def test_grant_is_bound_to_its_run_and_fetcher(signer, verifier, run, fetcher, reason):
    token = signer.issue("run-a", fetcher=3, owner=5, round=2, ttl_s=60)
    with pytest.raises(InvalidGrant, match=reason):
        verifier.verify(token, run=run, owner=5, round=2, fetcher=fetcher)


def test_unauthenticated_link_leaves_the_fetcher_unchecked(signer, verifier):
    token = signer.issue("run-a", fetcher=3, owner=5, round=2, ttl_s=60)
    assert verifier.verify(token, run="run-a", owner=5, round=2, fetcher=None).fetcher == 3
