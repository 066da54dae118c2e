"""The coordinator daemon's own defences: a damaged database, its TLS service, its launcher."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args
from support.coordinator import served, valid_request
from support.pki import TestCA

from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.service_client import CoordinatorClient, CoordinatorUnreachable
from collabfl.coordinator.settings import CoordinatorSettings, parser
from collabfl.coordinator.store.state import CoordinatorState, CorruptDatabase
from collabfl.coordinator.superlink import run_launcher
from collabfl.coordinator.superlink.flower_runs import FlowerCliError
from collabfl.coordinator.superlink.flower_status import flower_run_id
from collabfl.coordinator.superlink.launch import Launch
from collabfl.coordinator.superlink.local_superlink import superlink_command
from collabfl.coordinator.superlink.run_launcher import RunLauncher
from collabfl.kernel.grants import generate_private_key
from collabfl.kernel.tickets import TicketSigner
from collabfl.kernel.tls import ClientTLS

pytestmark = pytest.mark.federation


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _daemon(state_dir: Path, *flags: str) -> list[str]:
    superlink, service = _free_ports(2)
    return [
        sys.executable, "-m", "collabfl.coordinator.daemon", "--state-dir", str(state_dir),
        "--superlink-port", str(superlink), "--service-port", str(service), *flags,
    ]  # fmt: skip


def _damaged_database(db: Path, start: int, stop: int) -> None:
    """A database with some runs, then bytes ``start:stop`` of its file overwritten."""
    with CoordinatorState(db) as state:
        for index in range(40):
            state.create_run(f"run-{index}", "dpfl", valid_request())
    data = bytearray(db.read_bytes())
    data[start:stop] = b"\xff" * (stop - start)
    db.write_bytes(bytes(data))


def test_a_damaged_database_is_refused_when_opened(tmp_path: Path) -> None:
    for start, stop in [(0, 100), (4096 * 2, 4096 * 3)]:  # the header; one page inside
        db = tmp_path / f"damaged-{start}.db"
        _damaged_database(db, start, stop)
        with pytest.raises(CorruptDatabase, match=f"coordinator database {db} is damaged"):
            CoordinatorState(db)


def test_corrupted_database_makes_the_daemon_exit_with_one_clear_line(tmp_path: Path) -> None:
    db = tmp_path / "coordinator.db"
    _damaged_database(db, 4096 * 2, 4096 * 3)  # opens fine; only a check finds the damage
    done = subprocess.run(
        _daemon(tmp_path, "--insecure"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"coordinator database {db} is damaged" in lines[0]
    assert "restore it from a backup" in lines[0]
    assert not (tmp_path / "superlink.log").exists()  # nothing else was started


def test_tls_daemon_admits_only_certified_callers(tmp_path: Path) -> None:
    """The daemon gives its service the federation CA: no certificate, no answer."""
    ca = TestCA()
    ca_file = ca.write_ca(tmp_path)
    cert, key = ca.coordinator().write(tmp_path, "coordinator")
    command = _daemon(
        tmp_path / "state",
        *("--ssl-ca-certfile", str(ca_file), "--ssl-certfile", str(cert)),
        *("--ssl-keyfile", str(key)),
    )
    address = f"127.0.0.1:{command[command.index('--service-port') + 1]}"
    operator = ca.operator()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        mutual = ClientTLS(ca.cert_pem, operator.cert, operator.key)
        with CoordinatorClient(address, timeout_s=2, tls=mutual) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    assert client.status().num_runs == 0
                    break
                except CoordinatorUnreachable:
                    assert time.monotonic() < deadline and process.poll() is None
                    time.sleep(0.5)
        with (
            CoordinatorClient(address, timeout_s=2, tls=ClientTLS(ca.cert_pem)) as anonymous,
            pytest.raises(CoordinatorUnreachable),
        ):
            anonymous.list_members()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_check_runs_fails_a_bad_run_and_still_launches_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored request no ServerApp could run (written before CreateRun checked requests)
    fails that run with the reason; the next run gets its launch, token and TLS files."""
    submitted: list[Path] = []

    def submit(app_dir: Path, connection: str, run_config: Path, env: dict) -> str:
        submitted.append(run_config)
        raise FlowerCliError("no SuperLink in this test")

    monkeypatch.setattr(run_launcher, "submit_run", submit)
    service = Launch(
        coordinator="127.0.0.1:9300",
        coordinator_ca="/etc/ca.pem",
        coordinator_cert="/etc/c.pem",
        coordinator_key="/etc/c.key",
    )
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        state.create_run("bad", "dpfl", {**valid_request(), "expected_clients": "three"})
        state.create_run("outside", "dpfl", valid_request(out_dir="/etc"))
        state.create_run("good", "dpfl", valid_request())
        tickets = TicketSigner(generate_private_key())
        launcher = RunLauncher(
            state, tmp_path, tmp_path / "runs", tmp_path / "app", {}, service, tickets, 60.0
        )
        launcher.check_runs()
        assert state.run("bad").status == "failed"
        assert "expected_clients must be int" in state.run("bad").message
        assert state.run("outside").status == "failed"
        assert "outside the coordinator's runs directory" in state.run("outside").message
        assert state.run("good").status == "running"
        [run_config] = submitted
        settings = parse_config_args([str(run_config)])  # as `flwr run -c` reads it
        assert settings["run-id"] == "good"
        assert settings["run-ticket"] != "" and settings["node-bindings"] == ""
        assert settings["coordinator-ca"] == "/etc/ca.pem"
        assert settings["out-dir"] == str((tmp_path / "runs" / "good").resolve())
        token_file = Path(settings["launch-token-file"])
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        state.check_launch("good", token_file.read_text())  # the latest launch's token
        assert token_file.read_text() not in run_config.read_text()  # only its path travels
        assert stat.S_IMODE(run_config.stat().st_mode) == 0o600  # it holds the run ticket


class FakeFlower:
    """Stands in for the ``flwr`` commands the launcher runs: each submit starts Flower run
    101, 102, ...; stops are recorded; a launch's log follower exits at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.submitted: list[dict] = []  # each launch's run config
        self.stopped: list[int] = []
        monkeypatch.setattr(run_launcher, "submit_run", self.submit)
        monkeypatch.setattr(run_launcher, "stop_run", self.stop)
        monkeypatch.setattr(
            run_launcher, "follow_command", lambda run, _: [sys.executable, "-c", ""]
        )

    def submit(self, app_dir: Path, connection: str, run_config: Path, env: dict) -> str:
        self.submitted.append(parse_config_args([str(run_config)]))  # as `flwr run -c` does
        return json.dumps({"success": True, "run-id": str(100 + len(self.submitted))})

    def stop(self, run_id: int, connection: str, env: dict) -> None:
        self.stopped.append(run_id)


def _launcher(state: CoordinatorState, tmp_path: Path, **kwargs) -> RunLauncher:
    tickets = TicketSigner(generate_private_key())
    return RunLauncher(
        state, tmp_path, tmp_path / "runs", tmp_path / "app", {}, Launch(), tickets, 60.0, **kwargs
    )


def test_runs_sharing_a_run_directory_keep_their_own_flower_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``federation up --methods a,b`` puts both runs in one directory. Launching b must not
    stop a's Flower run (a relaunch stops its own run's previous one), and status names
    each run's own Flower run."""
    flower = FakeFlower(monkeypatch)
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path)
        state.create_run("a", "dpfl", valid_request(out_dir="shared"))
        launcher.check_runs()
        state.finish_run("a", "finished", "")
        state.create_run("b", "pfedgraph", valid_request("pfedgraph", out_dir="shared"))
        launcher.check_runs()
        assert flower.stopped == []
        launcher.running["b"].wait(timeout=60)  # b's ServerApp "died": launch it again
        launcher.check_runs()
        assert flower.stopped == [102]
        runs = {run.run_id: run for run in state.runs()}
        assert flower_run_id(tmp_path, runs["a"]) == 101
        assert flower_run_id(tmp_path, runs["b"]) == 103
        launcher.stop()


def test_a_created_run_is_launched_without_waiting_for_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CreateRun rings the launcher: the run launches long before the launcher's own next
    check (here an hour away), and stopping the launcher ends its loop at once too."""
    flower = FakeFlower(monkeypatch)
    activity = FleetActivity()
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path, wake=activity.runs, check_every_s=3600.0)
        loop = threading.Thread(target=launcher.loop, daemon=True)
        loop.start()
        with served(state, runs_dir=tmp_path / "runs", activity=activity) as address:
            with CoordinatorClient(address, timeout_s=30) as client:
                client.create_run("r", "dpfl", valid_request())
            deadline = time.monotonic() + 120  # a loaded machine's slack, not the clock
            while not flower.submitted and time.monotonic() < deadline:
                time.sleep(0.05)
        assert len(flower.submitted) == 1
        launcher.stop()
        loop.join(timeout=60)
        assert not loop.is_alive()


def test_nothing_launches_until_a_restarted_superlink_has_the_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ServerApp launched before the SuperNode keys are registered again would get the
    dead SuperLink's node ids and refuse every node for its run: the launcher waits."""
    flower = FakeFlower(monkeypatch)
    ready = threading.Event()
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path, superlink_ready=ready)
        state.create_run("r", "dpfl", valid_request())
        launcher.check_runs()
        assert flower.submitted == []
        ready.set()
        launcher.check_runs()
        assert len(flower.submitted) == 1
        launcher.stop()


def test_the_superlink_state_is_memory_unless_disk_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def database(*flags: str) -> str:
        args = parser().parse_args(["--state-dir", str(tmp_path), "--insecure", *flags])
        command = superlink_command(CoordinatorSettings.from_flags(args))
        return command[command.index("--database") + 1]

    assert database() == ":flwr-in-memory:"
    assert database("--superlink-state", "disk") == str((tmp_path / "superlink.db").resolve())
    with pytest.raises(SystemExit):
        database("--superlink-state", "ram")
    assert "--superlink-state: invalid choice: 'ram' (choose from" in capsys.readouterr().err
