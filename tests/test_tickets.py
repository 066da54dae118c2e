"""Run tickets: the coordinator's pass for its own runs, and every way one can be wrong."""

from __future__ import annotations

import pytest

from collabfl.kernel.grants import GrantSigner, generate_private_key
from collabfl.kernel.tickets import InvalidTicket, TicketSigner, TicketVerifier


@pytest.fixture
def key():
    return generate_private_key()


@pytest.fixture
def verifier(key) -> TicketVerifier:
    return TicketVerifier(GrantSigner(key).public_key_bytes())


def test_genuine_ticket_verifies(key, verifier):
    ticket = verifier.verify(TicketSigner(key).issue("run-a", ttl_s=60), run="run-a")
    assert ticket.run == "run-a"


def test_ticket_of_another_key_is_refused(verifier):
    forged = TicketSigner(generate_private_key()).issue("run-a", ttl_s=60)
    with pytest.raises(InvalidTicket, match="bad signature"):
        verifier.verify(forged, run="run-a")


def test_ticket_for_another_run_is_refused(key, verifier):
    with pytest.raises(InvalidTicket, match="not 'run-b'"):
        verifier.verify(TicketSigner(key).issue("run-a", ttl_s=60), run="run-b")


def test_expired_ticket_is_refused(key):
    token = TicketSigner(key).issue("run-a", ttl_s=1)
    verifier = TicketVerifier(GrantSigner(key).public_key_bytes(), clock=lambda: 10**12)
    with pytest.raises(InvalidTicket, match="expired"):
        verifier.verify(token, run="run-a")


def test_a_grant_is_not_a_ticket(key, verifier):
    grant = GrantSigner(key).issue("run-a", fetcher=1, owner=2, round=0, ttl_s=60).decode()
    with pytest.raises(InvalidTicket, match="not a run ticket"):
        verifier.verify(grant, run="run-a")


@pytest.mark.parametrize("token", ["", "x", "a.b.c", "!!.!!", "A" * 2000])
def test_malformed_tickets_are_refused(verifier, token):
    with pytest.raises(InvalidTicket):
        verifier.verify(token, run="run-a")
