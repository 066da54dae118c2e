"""What a stranger can make the Fleet gateway hold before any authentication.

A real gateway (uvicorn) in this process, in front of a real HTTP upstream standing in for
the SuperLink (tests/test_fleet_long_poll.py's), with small limits: a body beyond the cap
gets 413 while this process's memory stays far below the body's size, a connection that
never finishes its headers or never asks anything is closed at the header deadline, and
one address with too many connections open is refused while another gets through.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from test_fleet_long_poll import FakeFleet, _serve

from collabfl.coordinator import daemon
from collabfl.coordinator.gateway.fleet_gateway import (
    PULL_PATH,
    PUSH_PATH,
    FleetGateway,
    GatewayLimits,
    LongPoll,
)
from collabfl.coordinator.settings import CoordinatorSettings, gateway_limits, parser

LIMITS = GatewayLimits(max_body_bytes=1 << 20, per_peer=3, header_timeout_s=1.0, idle_s=1)
BODY = 50 << 20
HOLD_S = 8.0
HELD_S = 120.0
"""How long the bound's test may have its pulls held: longer than starting them takes on a
loaded machine. The test ends them itself."""


@pytest.fixture
def fleet() -> FakeFleet:
    return FakeFleet()


@pytest.fixture
def gateway(fleet: FakeFleet) -> Iterator[int]:
    yield from _started(fleet, HOLD_S)


@pytest.fixture
def holding_gateway(fleet: FakeFleet) -> Iterator[int]:
    yield from _started(fleet, HELD_S)


def _started(fleet: FakeFleet, hold_s: float) -> Iterator[int]:
    """A gateway in front of ``fleet`` that holds an empty pull up to ``hold_s``; its port."""
    routes = [
        Route(PULL_PATH, fleet.pull, methods=["POST"]),
        Route(PUSH_PATH, fleet.push, methods=["POST"]),
    ]
    upstream, upstream_port = _serve(Starlette(routes=routes))
    gateway = FleetGateway(
        "127.0.0.1", 0, f"http://127.0.0.1:{upstream_port}", None, None,
        long_poll=LongPoll(hold_s=hold_s, first_s=0.05, max_s=0.2), limits=LIMITS,
    )  # fmt: skip
    port = gateway.start()
    yield port
    gateway.stop()
    upstream.should_exit = True


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class PeakRSS:
    """This process's largest resident size while the block runs, sampled every 5 ms."""

    def __init__(self) -> None:
        self.peak = self.start = _rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.start


def _post_anonymous(port: int, declare_length: bool) -> int:
    """POST a 50 MB body (declared, or chunked without a length) as a stranger would;
    returns the answer's status. The body is sent from a thread while the answer is read,
    as a refusal may come before the body is all sent."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=60)
    framing = f"content-length: {BODY}" if declare_length else "transfer-encoding: chunked"
    head = f"POST {PUSH_PATH} HTTP/1.1\r\nhost: x\r\n{framing}\r\n\r\n".encode()
    piece = bytes(1 << 20)
    if not declare_length:
        piece = b"%x\r\n" % len(piece) + piece + b"\r\n"

    def send() -> None:
        try:
            connection.sendall(head)
            for _ in range(BODY >> 20):
                connection.sendall(piece)
            if not declare_length:
                connection.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the gateway closed the connection: the rest is not wanted

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    try:
        while b"\r\n" not in answer and (data := connection.recv(4096)):
            answer += data
    finally:
        sender.join(timeout=60)
        connection.close()
    return int(answer.split()[1])


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "chunked"])
def test_an_oversized_anonymous_body_is_refused_without_being_buffered(gateway, declare_length):
    with PeakRSS() as rss:
        status = _post_anonymous(gateway, declare_length)
    assert status == 413
    assert rss.growth < BODY // 3, f"RSS grew by {rss.growth / 2**20:.0f} MiB"


def _closed_within(connection: socket.socket, limit_s: float) -> float:
    """Seconds until the gateway closes ``connection``; fails past ``limit_s``."""
    started = time.monotonic()
    connection.settimeout(limit_s)
    try:
        while connection.recv(4096):
            pass
    except TimeoutError:
        raise AssertionError(f"the connection was still open after {limit_s} s") from None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_a_connection_that_never_finishes_its_headers_is_closed(gateway):
    with socket.create_connection(("127.0.0.1", gateway)) as slowloris:
        slowloris.sendall(f"POST {PULL_PATH} HTTP/1.1\r\nhost: x\r\nx-slow: ".encode())
        assert _closed_within(slowloris, 10 * LIMITS.header_timeout_s) >= 0.5


def test_a_connection_that_never_asks_anything_is_closed(gateway):
    with socket.create_connection(("127.0.0.1", gateway)) as idle:
        _closed_within(idle, 10 * LIMITS.header_timeout_s)


def test_an_idle_connection_after_a_response_is_closed(gateway):
    with socket.create_connection(("127.0.0.1", gateway)) as idle:
        idle.sendall(b"GET /v1/control/list-runs HTTP/1.1\r\nhost: x\r\n\r\n")
        assert idle.recv(4096).startswith(b"HTTP/1.1 403")
        _closed_within(idle, 10 * LIMITS.idle_s)


def _wait_until(condition, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {limit_s} s"
        time.sleep(0.01)


def _release(fleet: FakeFleet, pulls: list[Future[httpx.Response]]) -> None:
    """End held pulls: each of the gateway's polls upstream takes one queued message."""
    while not all(pull.done() for pull in pulls):
        if fleet.queued is None:
            fleet.queue("release")
        time.sleep(0.01)


def test_one_address_is_bounded_while_another_gets_through(holding_gateway, fleet):
    base = f"http://127.0.0.1:{holding_gateway}"
    with ThreadPoolExecutor(LIMITS.per_peer) as pool, httpx.Client(timeout=60) as client:
        held = []
        for n in range(1, LIMITS.per_peer + 1):  # each held by the gateway (empty pulls)
            held.append(pool.submit(client.post, f"{base}{PULL_PATH}", content=b""))
            _wait_until(lambda n=n: fleet.pulls >= n)
        with pytest.raises(httpx.TransportError):  # a fourth connection is closed at once
            client.post(f"{base}{PUSH_PATH}", content=b"")
        spoofed = {"x-forwarded-for": "10.9.9.9", "forwarded": "for=10.9.9.9"}
        with pytest.raises(httpx.TransportError):
            client.post(f"{base}{PUSH_PATH}", headers=spoofed)
        other = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(transport=other, timeout=30) as neighbour:
            assert neighbour.post(f"{base}{PUSH_PATH}", content=b"").status_code == 200
        _release(fleet, held)
        assert all(pull.result().status_code == 200 for pull in held)  # held, not refused
    # the bound lifts once they end
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{base}{PUSH_PATH}", content=b"").status_code == 200


def test_the_coordinator_sets_the_limits_from_its_flags(tmp_path):
    base = ["--state-dir", str(tmp_path), "--insecure"]

    def limits_of(argv: list[str]) -> GatewayLimits:
        return gateway_limits(CoordinatorSettings.from_flags(parser().parse_args(argv)))

    assert limits_of(base) == GatewayLimits()
    flags = [*base, "--fleet-max-body-mib", "64", "--fleet-per-peer", "200"]
    limits = limits_of([*flags, "--fleet-body-timeout", "15"])
    assert (limits.max_body_bytes, limits.per_peer, limits.body_timeout_s) == (64 << 20, 200, 15)
    assert daemon.main([*base, "--fleet-max-body-mib", "0"]) == 2
    assert daemon.main([*base, "--fleet-body-timeout", "0"]) == 2
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_endless_request_headers_are_cut_without_being_buffered(gateway):
    """Headers sent fast enough to beat the header deadline: 60 MB of them is refused at the
    header size limit, with this process's memory far below what was sent."""
    line = b"x-pad: " + b"a" * 1000 + b"\r\n"
    with socket.create_connection(("127.0.0.1", gateway), timeout=30) as stream, PeakRSS() as rss:
        stream.sendall(f"POST {PUSH_PATH} HTTP/1.1\r\nhost: x\r\n".encode())
        with pytest.raises(OSError):  # the gateway closes the connection
            for _ in range(60_000):
                stream.sendall(line)
    assert rss.growth < 10 << 20, f"RSS grew by {rss.growth / 2**20:.0f} MiB"
