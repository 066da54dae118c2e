"""The coordinator daemon's own defences: a damaged database, its TLS service, its launcher."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from flwr.proto.fab_pb2 import Fab
from support.coordinator import served, valid_request
from support.pki import TestCA

from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.service_client import CoordinatorClient, CoordinatorUnreachable
from collabfl.coordinator.settings import CoordinatorSettings, parser
from collabfl.coordinator.store.state import CoordinatorState, CorruptDatabase
from collabfl.coordinator.superlink.flower_runs import app_fab
from collabfl.coordinator.superlink.flower_status import flower_run_id
from collabfl.coordinator.superlink.launch import Launch
from collabfl.coordinator.superlink.local_superlink import superlink_command
from collabfl.coordinator.superlink.run_launcher import MAX_LAUNCHES, RunLauncher, write_app
from collabfl.coordinator.superlink.superlink_control import ControlError, SuperLinkUnreachable
from collabfl.kernel.grants import generate_private_key
from collabfl.kernel.supervisor import stop_group
from collabfl.kernel.tickets import TicketSigner
from collabfl.kernel.tls import ClientTLS
from tests.support.tls_superlink import TlsSuperLink

pytestmark = pytest.mark.federation


def _daemon(state_dir: Path, ports: list[int], *flags: str) -> list[str]:
    """The coordinator daemon's argv on the reserved ``ports`` (Fleet gateway, service)."""
    superlink, service = ports
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


def test_corrupted_database_makes_the_daemon_exit_with_one_clear_line(
    tmp_path: Path, reserve_ports: Callable[[int], list[int]]
) -> None:
    db = tmp_path / "coordinator.db"
    _damaged_database(db, 4096 * 2, 4096 * 3)  # opens fine; only a check finds the damage
    done = subprocess.run(
        _daemon(tmp_path, reserve_ports(2), "--insecure"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"coordinator database {db} is damaged" in lines[0]
    assert "restore it from a backup" in lines[0]
    assert not (tmp_path / "superlink.log").exists()  # nothing else was started


def test_tls_daemon_admits_only_certified_callers(
    tmp_path: Path, reserve_ports: Callable[[int], list[int]]
) -> None:
    """The daemon gives its service the federation CA: no certificate, no answer."""
    ca = TestCA()
    ca_file = ca.write_ca(tmp_path)
    cert, key = ca.coordinator().write(tmp_path, "coordinator")
    command = _daemon(
        tmp_path / "state",
        reserve_ports(2),
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


def test_check_runs_fails_a_bad_run_and_still_launches_the_others(tmp_path: Path) -> None:
    """A stored request no ServerApp could run (written before CreateRun checked requests)
    fails that run with the reason; the next run gets its launch, token and TLS files."""
    flower = FakeFlower(refuse="no SuperLink in this test")
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
        launcher = _launcher(state, tmp_path, flower, service=service)
        launcher.check_runs()
        assert state.run("bad").status == "failed"
        assert "expected_clients must be int" in state.run("bad").message
        assert state.run("outside").status == "failed"
        assert "outside the coordinator's runs directory" in state.run("outside").message
        assert state.run("good").status == "running"
        [settings] = flower.submitted
        assert settings["run-id"] == "good"
        assert settings["run-ticket"] != "" and settings["node-bindings"] == ""
        assert settings["coordinator-ca"] == "/etc/ca.pem"
        assert settings["out-dir"] == str((tmp_path / "runs" / "good").resolve())
        assert isinstance(settings["expected-clients"], int)  # typed, as the app declares it
        token_file = Path(settings["launch-token-file"])
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        state.check_launch("good", token_file.read_text())  # the latest launch's token
        assert token_file.read_text() not in settings.values()  # only its path travels
        assert "good" not in launcher.running  # not started: nothing to follow


class FakeLogStream:
    """A Flower run's log stream that yields ``lines`` and ends (the run ended), or, with
    ``hold``, waits until closed (a live run)."""

    def __init__(self, run_id: int, lines: list[str], hold: bool) -> None:
        self.run_id = run_id
        self.lines = lines
        self.closed = threading.Event()
        self.hold = hold

    def __iter__(self):
        yield from self.lines
        if self.hold:
            self.closed.wait()

    def close(self) -> None:
        self.closed.set()


class FakeFlower:
    """Stands in for the SuperLink's Control API the launcher calls: each start starts
    Flower run 101, 102, ...; stops are recorded; a launch's log stream yields ``log`` and
    ends at once (its ServerApp died), or with ``hold`` stays open until closed."""

    def __init__(
        self, log: list[str] | None = None, hold: bool = False, refuse: str = "",
        unreachable: int = 0,
    ) -> None:  # fmt: skip
        """``unreachable``: how many calls find no SuperLink listening (it is starting)."""
        self.submitted: list[dict] = []  # each launch's run config
        self.stopped: list[int] = []
        self.streams: list[FakeLogStream] = []
        self.log = log or []
        self.hold = hold
        self.refuse = refuse
        self.unreachable = unreachable
        self.asked_nodes = 0

    def nodes(self) -> list[dict]:
        self.asked_nodes += 1
        if self.unreachable:
            self.unreachable -= 1
            raise SuperLinkUnreachable("could not list the SuperNodes: Connection refused")
        return []

    def start_run(self, fab: Fab, config: dict) -> int:
        if self.unreachable:
            self.unreachable -= 1
            raise SuperLinkUnreachable("could not start a Flower run: Connection refused")
        self.submitted.append(dict(config))
        if self.refuse:
            raise ControlError(self.refuse)
        return 100 + len(self.submitted)

    def stop_run(self, run_id: int) -> None:
        self.stopped.append(run_id)

    def log_stream(self, run_id: int) -> FakeLogStream:
        self.streams.append(FakeLogStream(run_id, self.log, self.hold))
        return self.streams[-1]


def _launcher(
    state: CoordinatorState, tmp_path: Path, flower: FakeFlower | None = None, **kwargs
) -> RunLauncher:
    tickets = TicketSigner(generate_private_key())
    kwargs.setdefault("service", Launch())
    return RunLauncher(
        state, tmp_path, tmp_path / "runs", Fab(), flower or FakeFlower(), tickets=tickets,
        ticket_ttl_s=60.0, **kwargs,
    )  # fmt: skip


def test_the_run_configs_an_earlier_release_left_are_removed_and_nothing_else(
    tmp_path: Path,
) -> None:
    """Before runs started through the Control API, each launch wrote its run config, run
    ticket included, to launch/<run>.run-config.toml; nothing reads them now."""
    launch = tmp_path / "launch"
    launch.mkdir()
    for name in ("r.run-config.toml", "r.token", "r.sizes.json", "r.flower-run.json"):
        (launch / name).write_text("x")
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        _launcher(state, tmp_path)
    assert sorted(p.name for p in launch.iterdir()) == [
        "r.flower-run.json", "r.sizes.json", "r.token",
    ]  # fmt: skip


def test_a_run_waits_for_a_superlink_that_does_not_listen_yet_without_using_its_launches(
    tmp_path: Path,
) -> None:
    """A restarted coordinator checks its runs before its new SuperLink listens. Those calls
    never reached a SuperLink: they are no launches, and the run is not failed as a ServerApp
    that kept dying (as it was, under load, in a CI run)."""
    flower = FakeFlower(hold=True, unreachable=MAX_LAUNCHES + 2)
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path, flower)
        state.create_run("r", "dpfl", valid_request())
        for _ in range(MAX_LAUNCHES + 3):
            launcher.check_runs()
        [run] = state.runs()
        assert run.active, run.message
        assert len(flower.submitted) == 1 and launcher.launches["r"] == 1
        assert launcher.running["r"].alive()
        launcher.stop()


def test_a_superlink_that_stays_down_costs_no_launch_token_per_check(tmp_path: Path) -> None:
    """While the SuperLink does not listen, each check asks it one cheap question instead of
    minting a launch token (a database write), writing its files and signing a ticket."""
    flower = FakeFlower(hold=True, unreachable=6)
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        minted: list[str] = []
        mint = state.new_launch
        state.new_launch = lambda run_id: minted.append(run_id) or mint(run_id)  # type: ignore[method-assign]
        launcher = _launcher(state, tmp_path, flower)
        state.create_run("r", "dpfl", valid_request())
        for _ in range(6):
            launcher.check_runs()
        assert minted == ["r"] and flower.asked_nodes == 5 and not flower.submitted
        launcher.check_runs()  # it listens now: one more token, and the run is submitted
        assert minted == ["r", "r"] and len(flower.submitted) == 1
        token_file = Path(flower.submitted[0]["launch-token-file"])
        state.check_launch("r", token_file.read_text())
        assert launcher.running["r"].alive()
        launcher.stop()


def test_runs_sharing_a_run_directory_keep_their_own_flower_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``federation up --methods a,b`` puts both runs in one directory. Launching b must not
    stop a's Flower run (a relaunch stops its own run's previous one), and status names
    each run's own Flower run."""
    flower = FakeFlower()
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path, flower)
        state.create_run("a", "dpfl", valid_request(out_dir="shared"))
        launcher.check_runs()
        state.finish_run("a", "finished", "")
        state.create_run("b", "pfedgraph", valid_request("pfedgraph", out_dir="shared"))
        launcher.check_runs()
        assert flower.stopped == []
        launcher.running["b"].thread.join(timeout=60)  # b's ServerApp "died": launch it again
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
    flower = FakeFlower()
    activity = FleetActivity()
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path, flower, wake=activity.runs, check_every_s=3600.0)
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
    flower = FakeFlower()
    ready = threading.Event()
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path, flower, superlink_ready=ready)
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


def test_the_serverapps_log_is_appended_to_the_run_folder_while_the_run_lives(
    tmp_path: Path,
) -> None:
    """The follower copies the stream into serverapp.log after what earlier launches wrote;
    while its stream is open the ServerApp counts as live (no second launch), and stopping
    the launcher closes it at once."""
    flower = FakeFlower(log=["INFO : Starting ServerApp\n", "INFO : round 0\n"], hold=True)
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        launcher = _launcher(state, tmp_path, flower)
        state.create_run("r", "dpfl", valid_request())
        log = tmp_path / "runs" / "r" / "serverapp.log"
        log.parent.mkdir(parents=True)
        log.write_text("earlier launch\n")
        launcher.check_runs()
        deadline = time.monotonic() + 30
        while log.read_text().count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log.read_text() == "earlier launch\nINFO : Starting ServerApp\nINFO : round 0\n"
        launcher.check_runs()
        assert len(flower.submitted) == 1  # its stream is open: the ServerApp lives
        started = time.monotonic()
        launcher.stop()
        assert not launcher.running["r"].alive() and time.monotonic() - started < 5
        assert flower.streams[0].closed.is_set()


def test_a_launch_starts_no_flwr_process_and_a_stopped_launcher_holds_no_superlink(
    tmp_path: Path,
) -> None:
    """Each launch is a StartRun and a log stream from the daemon's own process, not a
    ``flwr run`` and a ``flwr log`` process (~1.5 CPU-s each); stopping the launcher closes
    the stream, so the SuperLink still stops on SIGTERM."""
    with (
        TlsSuperLink(tmp_path / "coordinator") as superlink,
        CoordinatorState(tmp_path / "coordinator.db") as state,
    ):
        superlink.nodes()  # answers
        launcher = RunLauncher(
            state, tmp_path, tmp_path / "runs", app_fab(write_app(tmp_path)), superlink.control,
            Launch(), TicketSigner(generate_private_key()), 60.0,
        )  # fmt: skip
        state.create_run("r", "dpfl", valid_request())
        launcher.check_runs()
        assert _flwr_children() == []
        [run] = state.runs()
        flower_run = flower_run_id(tmp_path, run)
        assert flower_run is not None
        assert launcher.running["r"].alive()  # pending: no ServerApp claims it here
        launcher.stop()
        assert not launcher.running["r"].alive()
        superlink.control.stop_run(flower_run)
        assert superlink.process is not None
        stop_group(superlink.process, grace_s=8.0)
        assert superlink.process.returncode != -signal.SIGKILL


def _flwr_children() -> list[str]:
    """Command lines of this process's children that run the ``flwr`` CLI."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat_file.read_text().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            command = (stat_file.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if "/flwr " in command:
            found.append(command)
    return found
