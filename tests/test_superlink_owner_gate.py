"""Contract (fails loudly on a Flower or uvicorn upgrade): what the owner-gated SuperLink
(coordinator/superlink/owner_gated_superlink.py) relies on. Flower installs ``flower-superlink`` as
a console script; uvicorn serves every connection with the protocol class ``Config.load`` leaves
in ``http_protocol_class``, so that a class set there sees each connection before any request.
The gate against a real SuperLink and a real other user: tests/test_fleet_gateway.py."""

from __future__ import annotations

import http.client
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from uvicorn.config import Config

from collabfl.coordinator.store.state import CoordinatorState
from collabfl.coordinator.superlink import local_superlink
from collabfl.coordinator.superlink.local_superlink import superlink_program
from collabfl.coordinator.superlink.owner_gated_superlink import (
    FLOWER_ENTRY_POINT,
    install_owner_gate,
)
from collabfl.flower.processes import flower_binary, flower_entry_point
from collabfl.kernel.python_command import module_command
from collabfl.kernel.socket_owner import owner_lookup_available

pytestmark = pytest.mark.skipif(not owner_lookup_available(), reason="needs /proc/net/tcp")


async def _hello(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


@contextmanager
def _served(owner: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A uvicorn server (as Flower runs one: h11 or httptools, whichever is installed) in
    this process with the gate installed for ``owner``; its loopback port."""
    monkeypatch.setattr(Config, "load", Config.load)  # undone after the test
    install_owner_gate(owner)
    server = uvicorn.Server(uvicorn.Config(_hello, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _get(port: int) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/")
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_contract_uvicorn_serves_its_owners_connections(monkeypatch):
    with _served(os.geteuid(), monkeypatch) as port:
        assert _get(port) == (200, b"hello")


def test_contract_uvicorn_refuses_every_other_users_connection(monkeypatch):
    with _served(os.geteuid() + 1, monkeypatch) as port:
        status, body = _get(port)
    assert status == 403
    assert f"only the processes of its own user (uid {os.geteuid() + 1})".encode() in body


def test_contract_flower_installs_the_superlink_as_a_console_script():
    from flwr.superlink.cli import flower_superlink as flowers

    assert flower_entry_point(FLOWER_ENTRY_POINT) is flowers
    assert FLOWER_ENTRY_POINT == "flower-superlink"


def test_the_coordinator_starts_the_gated_superlink():
    gated = "collabfl.coordinator.superlink.owner_gated_superlink"
    assert superlink_program() == module_command(gated)


def test_a_start_that_cannot_gate_the_superlink_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(local_superlink, "owner_lookup_available", lambda: False)
    state = CoordinatorState(tmp_path / "coordinator.db")
    try:
        local_superlink.report_control_api_access(state, 41234)
        events = state.events()
    finally:
        state.close()
    assert local_superlink.superlink_program() == [flower_binary("flower-superlink")]
    (event,) = events
    assert (event.kind, event.level, event.run_id) == (
        local_superlink.CONTROL_API_OPEN,
        "warning",
        "",
    )
    assert "127.0.0.1:41234 answers every local user of this host" in event.message
    assert event.message in caplog.text


def test_a_start_that_gates_it_says_whose_it_is(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="collabfl.coordinator")
    state = CoordinatorState(tmp_path / "coordinator.db")
    try:
        local_superlink.report_control_api_access(state, 41234)
        assert state.events() == []
    finally:
        state.close()
    assert f"answers only this user's processes (uid {os.geteuid()})" in caplog.text
