"""``federation up`` keeps its federation through a blip and notices a dead daemon.

A status poll that finds no coordinator once (it was restarting) is asked again, not taken
for the end of the federation; a daemon that dies is started again, and one that keeps
dying ends the run with its name and its last log line. The daemons here are stand-ins
(real processes that die or sleep); the coordinator's answers come from a stub client.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from collabfl.coordinator.service_client import CoordinatorUnreachable
from collabfl.coordinator.store.state import Run
from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec
from collabfl.kernel.supervisor import RestartPolicy
from collabfl.launcher.federation import DaemonFailed, LocalFederation, run_on_federation

pytestmark = pytest.mark.federation

QUICK = RestartPolicy(max_restarts=1, backoff_max_s=1.0)


class StubCoordinator:
    """Answers ``get_run`` with ``statuses`` in turn (the last for ever); ``None`` in them
    is a poll that finds no coordinator."""

    def __init__(self, statuses: list[str | None]) -> None:
        self.statuses = statuses
        self.polls = 0

    def __enter__(self) -> StubCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def create_run(self, run_id: str, *args: object, **kwargs: object) -> None:
        self.run_id = run_id

    def stop_run(self, run_id: str) -> None:
        pass

    def get_run(self, run_id: str) -> Run:
        status = self.statuses[min(self.polls, len(self.statuses) - 1)]
        self.polls += 1
        if status is None:
            raise CoordinatorUnreachable("Stream removed")
        return Run(run_id, "dpfl", {}, status, 0, 0.0, 0.0)


def federation_with(tmp_path: Path, stub: StubCoordinator) -> LocalFederation:
    federation = LocalFederation(tmp_path / "work", [tmp_path / "client-0.npz"])
    federation.restart_policy = QUICK
    federation.client = lambda timeout_s=10.0: stub  # type: ignore[method-assign]
    return federation


def run(federation: LocalFederation, out: Path, timeout_s: float = 60.0) -> dict:
    spec = parse_method_spec("dpfl", load_config(None, ["data.num_clients=1", "rounds=1"]))
    return run_on_federation(federation, spec, out, Console(quiet=True), timeout_s)


def test_a_poll_that_finds_no_coordinator_once_is_asked_again(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "dpfl").mkdir(parents=True)
    (out / "dpfl" / "summary.json").write_text(json.dumps({"status": "finished"}))
    stub = StubCoordinator(["running", None, "finished"])
    assert run(federation_with(tmp_path, stub), out) == {"status": "finished"}
    assert stub.polls == 3


def test_a_client_daemon_that_keeps_dying_ends_the_run_naming_it(tmp_path: Path) -> None:
    federation = federation_with(tmp_path, StubCoordinator(["running"]))
    crash = "print('no such data file: client-1.npz', flush=True); raise SystemExit(3)"
    federation._spawn("client-1", [sys.executable, "-c", crash])
    started = time.monotonic()
    with pytest.raises(DaemonFailed) as failed:  # restarted once, then given up
        run(federation, tmp_path / "out", timeout_s=30)
    assert str(failed.value).startswith(
        "client-1 exited with 3, 2 times in a row; its last log line: "
        "'no such data file: client-1.npz'"
    )
    assert time.monotonic() - started < 20
    assert federation.log_path("client-1").read_text().count("no such data file") == 2


def test_a_killed_daemon_is_started_again(tmp_path: Path) -> None:
    federation = federation_with(tmp_path, StubCoordinator(["running"]))
    federation._spawn("client-0", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        killed = federation.processes["client-0"]
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=10)
        deadline = time.monotonic() + 30
        while federation.processes["client-0"] is killed and time.monotonic() < deadline:
            federation.supervise()
            time.sleep(0.1)
        assert federation.processes["client-0"].poll() is None, "not started again"
    finally:
        federation.stop()
