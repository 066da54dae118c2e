"""Slow joins against the coordinator's public port: bounded per address, dropped at the
body deadline, limited as a surface, while the Fleet API and ``/health`` still answer.

Before, the join path bypassed the gateway's per-address bound and read bodies with no
deadline: 300 slow-body joins from one address were all held (0 refused, 0 closed after
30 s), and 4,200 filled uvicorn's limit so that ``/health`` and every SuperNode got 503.
A real gateway (uvicorn) in this process, with a real enrolment endpoint and a real HTTP
upstream standing in for the SuperLink, with small limits so that each test takes seconds.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from test_enrolment import Clock, FakeSuperLink
from test_fleet_long_poll import FakeFleet, _serve

from collabfl.coordinator.enrolment.coordinator_pki import ensure_pki
from collabfl.coordinator.enrolment.enrolment import Enroller
from collabfl.coordinator.gateway.fleet_gateway import PUSH_PATH, FleetGateway, GatewayLimits
from collabfl.coordinator.gateway.join_endpoint import JOIN_PATH, JoinEndpoint
from collabfl.coordinator.gateway.join_slots import (
    MAX_JOINS_IN_FLIGHT,
    MAX_JOINS_PER_ADDRESS,
    JoinSlots,
)
from collabfl.coordinator.store.enrolment_store import EnrolmentStore
from collabfl.coordinator.store.state import CoordinatorState

LIMITS = GatewayLimits(per_peer=6, max_concurrency=16, header_timeout_s=5.0, body_timeout_s=3.0)
"""Room for 16 connections in all: 20 slow joins from one address would take every one."""
MAX_JOINS = 2
assert LIMITS.per_peer < MAX_JOINS_IN_FLIGHT  # the per-address bound is what bites first
SLOW_JOIN = (
    f"POST {JOIN_PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    "content-length: 4096\r\n\r\n{"
).encode()
"""A join that promises 4 KiB of body and sends one byte of it."""


async def _health(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


@pytest.fixture
def port(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[int]:
    """A started gateway's port; joins in flight bounded by the test's parameter (else by
    the defaults)."""
    slots = getattr(request, "param", JoinSlots())
    fleet = FakeFleet()
    routes = [Route(PUSH_PATH, fleet.push, methods=["POST"]), Route("/health", _health)]
    upstream, upstream_port = _serve(Starlette(routes=routes))
    state = CoordinatorState(tmp_path / "coordinator.db")
    enroller = Enroller(
        ensure_pki(tmp_path / "pki", ["localhost"]), EnrolmentStore(tmp_path / "coordinator.db"),
        state, FakeSuperLink().registry(), b"grant key", "localhost:9300", "localhost:0",
        clock=Clock(),
    )  # fmt: skip
    gateway = FleetGateway(
        "127.0.0.1", 0, f"http://127.0.0.1:{upstream_port}", None, None,
        enrolment=JoinEndpoint(enroller, slots=slots), limits=LIMITS,
    )  # fmt: skip
    yield gateway.start()
    gateway.stop()
    upstream.should_exit = True
    state.close()


class SlowJoin:
    """A join that sends its headers and one byte of its body, from ``source``; what the
    gateway answers is kept in ``answer``."""

    def __init__(self, port: int, source: str) -> None:
        self.connection = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
        self.connection.sendall(SLOW_JOIN)
        self.connection.setblocking(False)
        self.answer = b""

    def closed(self) -> bool:
        """Whether the gateway has closed the connection (after an answer, or without)."""
        try:
            while data := self.connection.recv(4096):
                self.answer += data
        except BlockingIOError:
            return False
        except ConnectionResetError:
            pass
        return True


def _closed(joins: list[SlowJoin]) -> int:
    return sum(join.closed() for join in joins)


def _wait_until(condition: Callable[[], bool], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {limit_s} s"
        time.sleep(0.01)


def _ask(port: int, method: str, path: str, source: str, body: bytes = b"") -> httpx.Response:
    """One request from the local address ``source`` on a fresh connection."""
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30) as client:
        return client.request(method, f"http://127.0.0.1:{port}{path}", content=body)


WIDE_SHARE = JoinSlots(MAX_JOINS_IN_FLIGHT, per_address=MAX_JOINS_IN_FLIGHT)
"""Join slots that one address may fill: the port's connection bound is what bites."""


@pytest.mark.parametrize("port", [WIDE_SHARE], indirect=True)
def test_slow_joins_from_one_address_are_bounded_and_dropped_while_fleet_answers(port):
    excess = 14
    opened = time.monotonic()
    joins = [SlowJoin(port, "127.0.0.1") for _ in range(LIMITS.per_peer + excess)]
    try:
        _wait_until(lambda: _closed(joins) >= excess, limit_s=10)
        assert _closed(joins) == excess  # the first per_peer are held, not refused
        assert _ask(port, "GET", "/health", "127.0.0.2").status_code == 200
        assert _ask(port, "POST", PUSH_PATH, "127.0.0.2").status_code == 200
        _wait_until(lambda: _closed(joins) == len(joins), limit_s=30)
        held_s = time.monotonic() - opened
        assert LIMITS.body_timeout_s * 0.8 <= held_s < LIMITS.body_timeout_s + 10
        assert [join.answer for join in joins] == [b""] * len(joins)  # dropped, no answer
        assert _ask(port, "GET", "/health", "127.0.0.1").status_code == 200  # the bound lifts
    finally:
        for join in joins:
            join.connection.close()


@pytest.mark.parametrize("port", [JoinSlots(MAX_JOINS, per_address=MAX_JOINS)], indirect=True)
def test_joins_in_flight_have_their_own_bound(port):
    joins = [SlowJoin(port, f"127.0.0.{10 + n}") for n in range(MAX_JOINS)]
    try:
        _wait_until(lambda: _post_join(port, "127.0.0.30").status_code == 503, limit_s=10)
        busy = _post_join(port, "127.0.0.31")
        assert busy.status_code == 503 and busy.headers["retry-after"] == "2"
        assert "joins are being served" in busy.text
        assert _ask(port, "POST", PUSH_PATH, "127.0.0.32").status_code == 200
        _wait_until(lambda: _closed(joins) == len(joins), limit_s=30)  # the body deadline
        assert _post_join(port, "127.0.0.33").status_code == 403  # served again: no token
    finally:
        for join in joins:
            join.connection.close()


def test_one_address_gets_its_share_of_the_joins_and_no_more(port):
    """Before: one address held all 8 join slots with slow bodies, and every other machine's
    join got 503 until the body deadline dropped them."""
    joins = [SlowJoin(port, "127.0.0.40") for _ in range(MAX_JOINS_PER_ADDRESS)]
    try:
        _wait_until(lambda: _post_join(port, "127.0.0.40").status_code == 503, limit_s=10)
        busy = _post_join(port, "127.0.0.40")
        assert busy.headers["retry-after"] == "2"
        assert "2 joins from 127.0.0.40 are being served, the most one address" in busy.text
        assert _post_join(port, "127.0.0.41").status_code == 403  # served: no token
        assert _closed(joins) == 0  # the share itself is still held
    finally:
        for join in joins:
            join.connection.close()


def _post_join(port: int, source: str) -> httpx.Response:
    return _ask(port, "POST", JOIN_PATH, source, b"{}")
