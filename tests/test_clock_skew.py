"""A participant whose clock is off: grants and run tickets still verify within the stated
tolerance (kernel/sealed.py's CLOCK_LEEWAY_S), and beyond it the refusal says that the clock
may be the cause; a SuperNode outside Flower's own window (5 s ahead, 305 s behind) is told
by how much its clock is off, in one line of its daemon's log. Each side gets its own,
shifted, clock."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from flwr.common import constant
from flwr.common.constant import TIMESTAMP_HEADER
from flwr.supercore.error.base import FlowerError
from flwr.superlink.routers.fleet import node_auth
from flwr.supernode import fleet_http_connection
from starlette.requests import Request

from collabfl.coordinator.gateway.fleet_gateway import ACTIVATE_PATH, FleetOnlyProxy
from collabfl.flower.supernode_diagnosis import Probe, SupernodeReasons, Where
from collabfl.kernel.grants import GrantSigner, GrantVerifier, InvalidGrant, generate_private_key
from collabfl.kernel.sealed import CLOCK_LEEWAY_S
from collabfl.kernel.tickets import InvalidTicket, TicketSigner, TicketVerifier

TTL_S = 10.0
LOGS = Path(__file__).parent / "data" / "supernode_logs"
WHERE = Where("10.77.3.1:9093", client_id=2, host="lab-b", coordinator="10.77.3.1:9093")


def shifted(offset_s: float) -> Callable[[], float]:
    return lambda: time.time() + offset_s


def test_the_tolerance_is_minutes() -> None:
    assert CLOCK_LEEWAY_S == 300.0  # docs/security.md states it


@pytest.mark.parametrize("ahead_s", [TTL_S + CLOCK_LEEWAY_S - 60, TTL_S + CLOCK_LEEWAY_S + 60])
def test_a_grant_served_by_a_fast_clock(ahead_s: float) -> None:
    key = generate_private_key()
    token = GrantSigner(key).issue("run-a", fetcher=3, owner=5, round=2, ttl_s=TTL_S)
    verifier = GrantVerifier(GrantSigner(key).public_key_bytes(), clock=shifted(ahead_s))
    if ahead_s < TTL_S + CLOCK_LEEWAY_S:
        verifier.verify(token, run="run-a", owner=5, round=2, fetcher=3)
        return
    with pytest.raises(InvalidGrant, match=r"expired \d+ s ago.*300 s.*clock") as refused:
        verifier.verify(token, run="run-a", owner=5, round=2, fetcher=3)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("ahead_s", [TTL_S + CLOCK_LEEWAY_S - 60, TTL_S + CLOCK_LEEWAY_S + 60])
def test_a_ticket_checked_by_a_fast_clock(ahead_s: float) -> None:
    key = generate_private_key()
    token = TicketSigner(key, clock=shifted(-ahead_s)).issue("run-a", ttl_s=TTL_S)
    verifier = TicketVerifier(GrantSigner(key).public_key_bytes())
    if ahead_s < TTL_S + CLOCK_LEEWAY_S:
        verifier.verify(token, run="run-a")
        return
    with pytest.raises(InvalidTicket, match=r"expired \d+ s ago.*300 s.*clock"):
        verifier.verify(token, run="run-a")


def _gateway_answer(ahead_s: float) -> tuple[httpx.Response, int]:
    """The gateway's answer to a SuperNode call signed ``ahead_s`` ahead of its clock, and
    how many calls reached the SuperLink (a stand-in)."""
    calls = []

    class SuperLink:
        async def request(self, method: str, path: str, **_: object) -> httpx.Response:
            calls.append(path)
            return httpx.Response(200, content=b"ok")

    now = time.time()
    signed = datetime.fromtimestamp(now + ahead_s, tz=UTC).isoformat()
    scope = {
        "type": "http",
        "method": "POST",
        "path": ACTIVATE_PATH,
        "headers": [(TIMESTAMP_HEADER.encode(), signed.encode())],
        "query_string": b"",
    }

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    proxy = FleetOnlyProxy("http://127.0.0.1:9", False, clock=lambda: now)
    proxy.client = SuperLink()  # type: ignore[assignment]
    answer = asyncio.run(proxy._forward(Request(scope, receive)))
    return httpx.Response(answer.status_code, content=answer.body), len(calls)


@pytest.mark.parametrize("ahead_s", [3.0, -240.0])
def test_a_supernode_within_flowers_window_is_forwarded(ahead_s: float) -> None:
    answer, forwarded = _gateway_answer(ahead_s)
    assert (answer.status_code, forwarded) == (200, 1)


@pytest.mark.parametrize(("ahead_s", "said"), [(90.0, "90 s ahead of"), (-400.0, "400 s behind")])
def test_a_supernode_with_a_skewed_clock_is_told_by_how_much(ahead_s: float, said: str) -> None:
    """Flower's SuperLink answers a bare 401 (its SuperNode prints "401 Unauthorized"); the
    gateway answers it with the offset, which the client daemon's log shows in one line."""
    answer, forwarded = _gateway_answer(ahead_s)
    assert (answer.status_code, forwarded) == (401, 0)
    # What Flower 1.41's SuperNode prints for a refused first call (fleet_http_connection.py)
    error = FlowerError.from_json(answer.text)
    assert error is not None and error.public_details is not None
    printed = f"[code: {error.code}] {error.message}\n{error.public_details}"
    log = (LOGS / "unregistered.log").read_text()
    log = log.replace("[code: 2004] Failed to activate SuperNode.", printed)
    line = SupernodeReasons(WHERE, Probe()).exited(log)
    assert "\n" not in line
    assert line.startswith("this machine's clock is too far off the coordinator's for Flower")
    assert f"this SuperNode's clock is {said} the coordinator's" in line
    assert "timedatectl set-ntp true" in line


def test_contract_flowers_window_and_what_its_supernode_prints_of_a_refusal() -> None:
    """Flower internals the gateway's clock check relies on (fails loudly on an upgrade): the
    SuperLink's window on the signed timestamp, and that a SuperNode whose first call is
    refused prints a Flower error's public details (the gateway's line with the offset)."""
    assert (constant.SYSTEM_TIME_TOLERANCE, constant.TIMESTAMP_TOLERANCE) == (5, 300)
    window = inspect.getsource(node_auth.authenticate_node)
    assert "request.headers[TIMESTAMP_HEADER]" in window
    assert "-SYSTEM_TIME_TOLERANCE" in window
    assert "TIMESTAMP_TOLERANCE + SYSTEM_TIME_TOLERANCE" in window
    connect = inspect.getsource(fleet_http_connection.http_request_response)
    assert "FlowerError.from_json(exc.response.text)" in connect
    assert "flower_error.public_details" in connect
