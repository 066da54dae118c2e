"""A run that waits for more clients than are online says so, and one that starts short of
them records who is missing.

Before, ``admin start --clients 4`` with 3 online showed "running, last round —" for the
two minutes of the join timeout with no hint, then ran with 3 and ended "finished" without
an event. The status line travels through the coordinator service (SetRunMessage, with the
ServerApp's launch token) to ``admin runs``, tested here against a real service.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.coordinator import served
from typer.testing import CliRunner

from collabfl.apps.server_app import missing_clients, wait_for_nodes
from collabfl.cli.admin import admin_app, tables
from collabfl.coordinator.service import CoordinatorService
from collabfl.coordinator.service_client import CoordinatorClient, CoordinatorError
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.engine.report.console import plain_console


class ArrivingGrid:
    """Three nodes online, a fourth never comes."""

    def __init__(self) -> None:
        self.reads = 0

    def get_node_ids(self) -> list[int]:
        self.reads += 1
        return [11, 12, 13]


def test_waiting_for_clients_says_how_many_joined_and_how_long_is_left() -> None:
    said: list[str] = []
    started = time.monotonic()
    nodes = wait_for_nodes(ArrivingGrid(), 4, started + 2.0, said.append)  # type: ignore[arg-type]
    assert nodes == [11, 12, 13]
    assert time.monotonic() - started >= 2.0
    assert said and said[0] == "waiting for clients: 3/4 joined, 2 s left"
    assert all(line.startswith("waiting for clients: 3/4 joined, ") for line in said)


def test_enough_clients_start_at_once_without_a_waiting_line() -> None:
    said: list[str] = []
    grid = ArrivingGrid()
    assert wait_for_nodes(grid, 3, time.monotonic() + 60, said.append) == [11, 12, 13]  # type: ignore[arg-type]
    assert said == [] and grid.reads == 1


def test_a_short_start_names_the_missing_clients() -> None:
    assert missing_clients(3, [0, 1, 2], [0, 1, 2]) is None
    message = missing_clients(4, [0, 1, 2], [0, 1, 2, 3])
    assert message is not None
    assert message.startswith("started with 3 of the 4 clients asked for")
    assert message.endswith("missing: client 3")
    unknown = missing_clients(4, [0, 2], [])
    assert unknown is not None and unknown.endswith("missing: 2 clients not known by id")


def test_the_status_line_reaches_admin_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "console", plain_console(width=80))
    with CoordinatorState(tmp_path / "c.db") as state, served(state) as address:
        state.create_run("r", "dpfl", {})
        with CoordinatorClient(address, launch_token="stale") as server_app:
            with pytest.raises(CoordinatorError, match="launch token"):
                server_app.set_run_message("r", "waiting for clients: 3/4 joined, 87 s left")
            server_app.launch_token = state.new_launch("r")
            server_app.set_run_message("r", "waiting for clients: 3/4 joined, 87 s left")
        result = CliRunner().invoke(admin_app, ["--coordinator", address, "runs"])
    assert result.exit_code == 0, result.output
    assert "r: waiting for clients: 3/4 joined, 87 s left" in result.stdout


def test_start_prints_how_to_follow_and_waits_for_the_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``admin start --wait`` prints the status line as it changes, until the clients joined."""
    lines = ["waiting for clients: 2/3 joined, 60 s left", "waiting for clients: 3/3 joined"]
    reads = threading.Semaphore(0)

    def server_app(state: CoordinatorState, address: str) -> None:
        """Changes the line once ``admin start --wait`` has read the current one."""
        deadline = time.monotonic() + 60
        while not state.runs() and time.monotonic() < deadline:
            time.sleep(0.05)
        with CoordinatorClient(address, launch_token=state.new_launch("w")) as client:
            for line in [*lines, "3 clients joined"]:
                client.set_run_message("w", line)
                for _ in range(2):  # a read that began before the change, and one after
                    assert reads.acquire(timeout=60)

    get_run = CoordinatorService.GetRun

    def counted(service: CoordinatorService, request: Any, context: Any) -> Any:
        try:
            return get_run(service, request, context)
        finally:
            reads.release()

    monkeypatch.setattr(CoordinatorService, "GetRun", counted)
    with CoordinatorState(tmp_path / "c.db") as state, served(state) as address:
        app = threading.Thread(target=server_app, args=(state, address))
        app.start()
        result = CliRunner().invoke(
            admin_app, ["--coordinator", address, "start", "--run-id", "w", "--wait"]
        )
        reads.release(10)
        app.join()
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "follow it: collabfl admin runs" in out and "collabfl admin events w" in out
    for line in [*lines, "3 clients joined"]:
        assert f"w: {line}" in out
    assert out.index(lines[0]) < out.index(lines[1]) < out.index("3 clients joined")
