"""``collabfl federation up``: a whole federation as real processes on this machine.

The same topology as a multi-machine deployment, on loopback: one ``collabfl-coordinator``
(SuperLink + coordinator service + ServerApp launcher) and N ``collabfl-client`` daemons
(SuperNode + peer server), each with its own data file and state directory. It waits until
every node is online, runs the configured methods through the coordinator service exactly
as an operator would, writes the same run directory as ``collabfl simulate``, and stops
only the processes it started.

While a run goes on it supervises its daemons: one that dies is started again after a
growing delay, and one that keeps dying ends the run with its name and its last log line.
A coordinator that does not answer a status poll (restarting, loaded) is asked again for
``POLL_RETRY_S`` before the launcher gives up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rich.console import Console

from collabfl.client.data.client_file import save_client_file
from collabfl.coordinator.daemon import grant_signer
from collabfl.coordinator.service_client import CoordinatorClient, CoordinatorUnreachable
from collabfl.coordinator.settings import PUBLIC_KEY_FILE
from collabfl.engine.config import ConfigError, ExperimentConfig, user_code
from collabfl.engine.experiment import check_user_code, prepare_data
from collabfl.engine.methods import MethodSpec, run_request
from collabfl.engine.recording import safe_name
from collabfl.engine.report.comparison import write_comparison
from collabfl.engine.report.setting import partition_text
from collabfl.engine.report.table import print_results
from collabfl.engine.run_options import RunOptions
from collabfl.engine.sourced import sourced_data
from collabfl.flower.processes import (
    DEFAULT_RUNTIME,
    flower_binary,
    has_joined,
)
from collabfl.flower.supernode_key import ensure_supernode_key
from collabfl.kernel.leftovers import reap_leftovers
from collabfl.kernel.log_rotation import rotate_copy
from collabfl.kernel.ports import PortReservation
from collabfl.kernel.python_command import module_command
from collabfl.kernel.supervisor import (
    HEALTHY_S,
    RestartPolicy,
    ended,
    plain_lines,
    stop_group,
    with_parent_death_signal,
)
from collabfl.launcher.federation_tls import FederationCredentials

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
COMMAND_HANG_S = 600.0
"""How long a one-shot ``collabfl admin`` or ``flwr`` command may take before it counts as
hung: about 2 s on an idle machine, past a minute on a loaded 2-core one."""
READY_CHECK_S = 0.05
"""How often a starting coordinator is asked whether it listens or is ready (a connect, or
a status call and a health check: a few milliseconds)."""
POLL_RETRY_S = 60.0
"""How long a status poll that finds no coordinator is retried before the launcher gives
up: a restarted coordinator serves again within seconds, a loaded machine's within tens."""
POLL_BACKOFF_MAX_S = 8.0
"""The longest pause between those retries (they start at half a second and double)."""
DAEMON_RESTARTS = RestartPolicy(max_restarts=3, backoff_max_s=30.0)
"""How the launcher restarts a daemon that died: after 1, 2, 4 s; a fourth death in a row
(each within ``HEALTHY_S`` of its start) ends the run."""

T = TypeVar("T")


class DaemonFailed(RuntimeError):
    """A daemon of the federation kept dying; the message names it and its last log line."""


def patiently(
    call: Callable[[], T],
    retry_s: float = POLL_RETRY_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, asked again after a growing pause while no coordinator answers, for
    ``retry_s`` at most; then CoordinatorUnreachable saying for how long."""
    deadline, pause = clock() + retry_s, 0.5
    while True:
        try:
            return call()
        except CoordinatorUnreachable as error:
            if clock() + pause > deadline:
                raise CoordinatorUnreachable(f"{error} (no answer for {retry_s:g} s)") from error
            log.warning("no answer from the coordinator; asking again in %g s", pause)
        sleep(pause)
        pause = min(2 * pause, POLL_BACKOFF_MAX_S)


class Hosts(Protocol):
    """Where each daemon of a federation runs: its address and how to start a command there.

    Daemons are named ``coordinator`` and ``client-K``. ``Loopback`` puts them all on this
    machine's 127.0.0.1; a multi-host test bed puts each in its own network namespace.
    """

    def address(self, name: str) -> str: ...

    def command(self, name: str, argv: list[str]) -> list[str]: ...


class Loopback:
    """Every daemon on this machine, bound to loopback."""

    def address(self, name: str) -> str:
        return HOST

    def command(self, name: str, argv: list[str]) -> list[str]:
        return argv


def coordinator_command(
    state_dir: Path,
    superlink_port: int,
    service_port: int,
    host: str = HOST,
    tls: FederationCredentials | None = None,
    runs_dir: Path | None = None,
) -> list[str]:
    """The coordinator daemon bound to ``host``; with ``tls``, TLS on every surface; runs may
    write only inside ``runs_dir`` (default: the daemon's, inside its state)."""
    runs = ["--runs-dir", str(runs_dir)] if runs_dir is not None else []
    return [
        *module_command("collabfl.coordinator.daemon"),
        "--state-dir", str(state_dir), "--host", host,
        "--superlink-port", str(superlink_port), "--service-port", str(service_port),
        *runs, *coordinator_tls_flags(tls),
    ]  # fmt: skip


def coordinator_tls_flags(tls: FederationCredentials | None) -> list[str]:
    """The coordinator's TLS flags: its certificate, and the CA it trusts for callers."""
    if tls is None:
        return ["--insecure"]
    return [
        "--ssl-ca-certfile", str(tls.ca),
        "--ssl-certfile", str(tls.coordinator.cert), "--ssl-keyfile", str(tls.coordinator.key),
    ]  # fmt: skip


def client_command(
    client_id: int,
    data: Path | str,
    state_dir: Path,
    superlink: str,
    peer_port: int,
    runtime_port: int,
    key: Path,
    runtime: str = DEFAULT_RUNTIME,
    host: str = HOST,
    tls: FederationCredentials | None = None,
    allow_imports: Sequence[str] = (),
) -> list[str]:
    """A client daemon whose peer server listens on, and is advertised at, ``host``;
    ``allow_imports``: the user code its runs may name (``--allow-import``)."""
    allowed = [arg for path in allow_imports for arg in ("--allow-import", path)]
    return [
        *module_command("collabfl.client.daemon"),
        "--client-id", str(client_id), "--data", str(data), "--state-dir", str(state_dir),
        "--superlink", superlink,
        "--peer-listen", f"{host}:{peer_port}", "--peer-address", f"{host}:{peer_port}",
        "--runtime-port", str(runtime_port), "--coordinator-key", str(key),
        "--runtime", runtime,
        *allowed,
        *client_tls_flags(client_id, tls),
    ]  # fmt: skip


def client_tls_flags(client_id: int, tls: FederationCredentials | None) -> list[str]:
    """A client's TLS flags: the federation CA (also the client CA of its peer server: mutual
    TLS) and its member pair."""
    if tls is None:
        return ["--insecure"]
    member = tls.members[client_id]
    return [
        "--root-certificates", str(tls.ca),
        "--peer-cert", str(member.cert), "--peer-key", str(member.key),
    ]  # fmt: skip


@dataclass
class LocalFederation:
    """Starts and stops the processes of a federation on this machine; a context manager.

    ``runtime``: how the client daemons run ClientApp messages (flower/processes.py's
    CLIENT_RUNTIMES). ``hosts``: where each daemon runs (default: all on loopback).
    ``tls``: issue a CA and role certificates into ``work_dir/tls`` and run every daemon
    with TLS; the launcher's own service calls then present the operator certificate.
    ``runs_dir``: the folder run directories must lie in (default: ``work_dir``'s parent,
    where ``federation up`` writes them). ``allow_imports``: user code every client allows
    (the same operator runs every party here, so it allows what its own config names).
    """

    work_dir: Path
    client_files: Sequence[Path | str]
    """Each client's ``--data``: a data file, or a ``data.source`` factory's import path."""
    runtime: str = DEFAULT_RUNTIME
    hosts: Hosts = field(default_factory=Loopback)
    tls: bool = False
    runs_dir: Path | None = None
    allow_imports: Sequence[str] = ()
    restart_policy: RestartPolicy = DAEMON_RESTARTS
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    """When each daemon was last started (monotonic seconds)."""
    deaths: dict[str, int] = field(default_factory=dict)
    """Each daemon's deaths in a row (within ``HEALTHY_S`` of its start), for ``supervise``."""
    restart_due: dict[str, float] = field(default_factory=dict)
    """When each daemon ``supervise`` found dead is to be started again (monotonic)."""

    @property
    def client_ids(self) -> range:
        return range(len(self.client_files))

    def __post_init__(self) -> None:
        n = len(self.client_files)
        self.reserved = PortReservation(2 + 2 * n)  # kept until stop: daemons restart on them
        ports = self.reserved.ports
        self.superlink_port, self.service_port = ports[:2]
        self.peer_ports, self.runtime_ports = ports[2 : 2 + n], ports[2 + n :]
        self.coordinator_dir = self.work_dir / "coordinator"
        self.coordinator_host = self.hosts.address("coordinator")
        self.service = f"{self.coordinator_host}:{self.service_port}"
        self.superlink = f"{self.coordinator_host}:{self.superlink_port}"
        self.credentials = (
            FederationCredentials.issue(
                self.work_dir / "tls",
                self.coordinator_host,
                {k: self.hosts.address(f"client-{k}") for k in range(n)},
            )
            if self.tls
            else None
        )

    def __enter__(self) -> LocalFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the coordinator and the clients; return once every client has joined.

        The grant key is made here, before the coordinator starts, so that the clients (who
        need its public half) start as soon as the coordinator's Fleet gateway listens
        rather than once the whole coordinator is up: on one machine they share its cores
        while it starts, and their SuperNodes' first calls wait in the gateway until the
        SuperLink answers. With TLS they start once it is up, because each SuperNode's key
        must be registered before the SuperNode may join.
        """
        grant_signer(self.coordinator_dir)
        command = coordinator_command(
            self.coordinator_dir,
            self.superlink_port,
            self.service_port,
            self.coordinator_host,
            self.credentials,
            self.runs_dir or self.work_dir.parent,
        )
        self._spawn("coordinator", command)
        if self.credentials is None:
            self._wait_listening(timeout_s)
            self._start_clients()
            self._wait_ready(timeout_s)
        else:
            self._wait_ready(timeout_s)
            self._start_clients()
        self._wait_connected(timeout_s)

    def _start_clients(self) -> None:
        key = self.coordinator_dir / PUBLIC_KEY_FILE
        for k, data in enumerate(self.client_files):
            self.start_client(k, data, key)

    def start_client(self, k: int, data: Path | str, key: Path) -> None:
        name = f"client-{k}"
        if self.credentials is not None:
            self.register_supernode(k, self.client_dir(k))
        command = client_command(
            k,
            data,
            self.client_dir(k),
            self.superlink,
            self.peer_ports[k],
            self.runtime_ports[k],
            key,
            self.runtime,
            self.hosts.address(name),
            self.credentials,
            self.allow_imports,
        )
        self._spawn(name, command)

    def register_supernode(self, k: int, state_dir: Path) -> None:
        """With TLS only registered SuperNode keys join: make client k's key where its daemon
        keeps it and have the coordinator register it, as its operator would (through the
        service, with the operator's certificate)."""
        _, public_key = ensure_supernode_key(state_dir)
        assert self.credentials is not None  # only a TLS federation registers keys
        operator = self.credentials.operator
        command = [
            flower_binary("collabfl"), "admin", "--coordinator", self.service,
            "--ca", str(self.credentials.ca), "--cert", str(operator.cert),
            "--key", str(operator.key),
            "register-supernode", "--client-id", str(k), "--key", str(public_key),
        ]  # fmt: skip
        done = subprocess.run(
            self.hosts.command("coordinator", command),
            capture_output=True, text=True, timeout=COMMAND_HANG_S, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"client {k}'s SuperNode key was not registered: {done.stderr}")

    def _spawn(self, name: str, command: list[str]) -> None:
        log_path = self.log_path(name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # A launcher that dies (even by SIGKILL) takes its federation with it.
        placed = self.hosts.command(name, with_parent_death_signal(command))
        with open(log_path, "ab") as log_file:
            self.processes[name] = subprocess.Popen(
                placed, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.commands[name] = command
        self.started[name] = time.monotonic()

    def supervise(self) -> None:
        """Start each daemon found dead again once its delay has passed (``restart_policy``);
        raise DaemonFailed for one that died too often in a row. Called between polls."""
        now = time.monotonic()
        for name, process in list(self.processes.items()):
            rotate_copy(self.log_path(name))
            if process.poll() is None:
                continue
            due = self.restart_due.get(name)
            if due is None:
                healthy = now - self.started.get(name, now) > HEALTHY_S
                deaths = 1 if healthy else self.deaths.get(name, 0) + 1
                self.deaths[name] = deaths
                why = f"{name} {ended(process.returncode)}"
                if self.restart_policy.gives_up(deaths):
                    raise DaemonFailed(
                        f"{why}, {deaths} times in a row; its last log line: "
                        f"{self.last_log_line(name)!r} (see {self.log_path(name)})"
                    )
                delay = self.restart_policy.delay_s(deaths)
                self.restart_due[name] = now + delay
                log.warning("%s (%s); restarting it in %g s", why, self.last_log_line(name), delay)
            elif now >= due:
                del self.restart_due[name]
                self.restart(name)

    def log_path(self, name: str) -> Path:
        return self.work_dir / "logs" / f"{name}.log"

    def last_log_line(self, name: str) -> str:
        """The last non-blank line a daemon wrote (its last 8 KiB read), or ""."""
        try:
            with open(self.log_path(name), "rb") as log_file:
                log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - 8192))
                lines = plain_lines(log_file.read().decode("utf-8", "replace"))
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def kill(self, name: str) -> None:
        """SIGKILL one daemon (a crash, not a shutdown); its Flower child follows it."""
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def restart(self, name: str) -> None:
        """Start a killed daemon again with the same command (same state directory)."""
        self._spawn(name, self.commands[name])

    def _wait_listening(self, timeout_s: float) -> None:
        """The coordinator's Fleet gateway accepts connections (its SuperLink may still be
        starting behind it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive("coordinator")
            with contextlib.suppress(OSError):
                socket.create_connection((self.coordinator_host, self.superlink_port), 1).close()
                return
            time.sleep(READY_CHECK_S)
        raise TimeoutError(f"the coordinator's gateway did not listen within {timeout_s:.0f} s")

    def _wait_ready(self, timeout_s: float) -> None:
        """The coordinator service answers and the SuperLink reports healthy."""
        deadline = time.monotonic() + timeout_s
        scheme, context = "http", None
        if self.credentials is not None:
            scheme, context = "https", ssl.create_default_context(cafile=self.credentials.ca)
        health = f"{scheme}://{self.superlink}/health"
        while time.monotonic() < deadline:
            self._check_alive("coordinator")
            try:
                with self.client(timeout_s=2) as client:
                    client.status()
                with urllib.request.urlopen(health, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (CoordinatorUnreachable, OSError):
                time.sleep(READY_CHECK_S)
        raise TimeoutError(f"the coordinator was not ready within {timeout_s:.0f} s")

    def _wait_connected(self, timeout_s: float) -> None:
        """Wait until every client's SuperNode has logged its node id (it connected), by
        reading the logs: a ``flwr`` query of the SuperLink starts a process that costs a
        CPU-second, which a federation starting on a small machine cannot spare. A SuperNode
        logs its id once the SuperLink has registered and activated it."""
        logs = {k: self.work_dir / f"client-{k}" / "supernode.log" for k in self.client_ids}
        deadline, left = time.monotonic() + timeout_s, len(logs)
        while waiting := [k for k, path in logs.items() if not has_joined(path)]:
            for name in self.processes:
                self._check_alive(name)
            if len(waiting) < left:  # progress on a loaded machine: give the rest as long
                deadline, left = time.monotonic() + timeout_s, len(waiting)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"clients {waiting} did not connect to the SuperLink within "
                    f"{timeout_s:.0f} s of the previous one; see their supernode.log"
                )
            time.sleep(0.1)

    def _check_alive(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is not None:
            raise RuntimeError(
                f"{name} {ended(process.returncode)}; its last log line: "
                f"{self.last_log_line(name)!r} (see {self.log_path(name)})"
            )

    def stop(self) -> None:
        """Clients first, all at once (each takes seconds to wind its SuperNode down, which
        one after another added up to most of a small federation's teardown), then the
        coordinator; only what this object started. Then whatever any of its daemons, this
        one or a killed predecessor, left running outside its process group: Flower's
        SuperExec starts ServerApps and ClientApps in sessions of their own, and after a
        SuperLink restart or a ``flwr stop`` one could outlive the teardown by minutes. Each
        carries its daemon's state dir (kernel/leftovers.py), so none of another's is hit."""
        clients = [p for name, p in self.processes.items() if name != "coordinator"]
        with ThreadPoolExecutor(max_workers=max(1, len(clients))) as pool:
            list(pool.map(lambda process: stop_group(process, grace_s=15.0), clients))
        if "coordinator" in self.processes:
            stop_group(self.processes["coordinator"], grace_s=15.0)
        if self.processes:
            for state_dir in [self.coordinator_dir, *(self.client_dir(k) for k in self.client_ids)]:
                reap_leftovers(state_dir)
        self.reserved.release()

    def client_dir(self, k: int) -> Path:
        """Client k's daemon's state dir."""
        return self.work_dir / f"client-{k}"

    def client(self, timeout_s: float = 10.0) -> CoordinatorClient:
        """A coordinator service client acting as the operator (its certificate under TLS)."""
        tls = self.credentials.operator_tls() if self.credentials is not None else None
        return CoordinatorClient(self.service, timeout_s=timeout_s, tls=tls)


def write_client_files(
    config: ExperimentConfig, folder: Path, partition_path: Path | None = None
) -> list[Path]:
    """One data file per client (``client-K.npz``) from the config's dataset and partition.

    In a real deployment every participant brings its own file; this makes demo ones.
    """
    if config.data.source is not None:
        raise ConfigError(
            f"data.source {config.data.source}: each participant reads its own data through "
            "it (collabfl-client --data); there are no files to prepare"
        )
    data = prepare_data(config)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # private data: a private folder
    (partition_path or folder / "partition.npz").parent.mkdir(parents=True, exist_ok=True)
    data.partition.save(partition_path or folder / "partition.npz")
    files = []
    for client in data.clients:
        path = folder / f"client-{client.client_id}.npz"
        save_client_file(
            client,
            path,
            num_classes=data.pool.num_classes,
            dataset=data.pool.name,
            partition=partition_text(config.data.model_dump()),
        )
        files.append(path)
    return files


def client_data(
    config: ExperimentConfig, specs: list[MethodSpec], out_dir: Path
) -> Sequence[Path | str]:
    """Each client daemon's ``--data``: the config's ``data.source`` factory, checked on a
    sample against every spec's model as ``simulate`` checks it (each daemon then calls it
    with its own client id), or a data file written from the dataset and partition."""
    source = config.data.source
    if source is not None:  # checked before --out is made: a refusal leaves none behind
        sourced_data(config, [spec.config for spec in specs])
    out_dir.mkdir(parents=True, exist_ok=True)
    if source is not None:
        return [source] * config.data.num_clients
    folder = out_dir / "federation" / "data"
    return write_client_files(config, folder, partition_path=out_dir / "partition.npz")


def run_on_federation(
    federation: LocalFederation,
    spec: MethodSpec,
    out_dir: Path,
    console: Console,
    timeout_s: float,
) -> dict[str, Any]:
    """Create one run through the coordinator service and wait for it to end."""
    run_id = f"{safe_name(spec.label)}-{int(time.time())}"
    options = RunOptions(
        expected_clients=len(federation.client_files), out_dir=str(out_dir.resolve())
    )
    config = run_request(spec, options)
    deadline = time.monotonic() + timeout_s
    with federation.client() as client:
        client.create_run(run_id, spec.label, config, out_claimed=True)  # federation_up's
        with console.status(f"{spec.label}: starting") as status:
            while True:
                run = patiently(lambda: client.get_run(run_id))
                federation.supervise()
                done = -1 if run.last_completed_round is None else run.last_completed_round
                said = f" ({run.message})" if run.message else ""  # e.g. paused: who is missing
                status.update(f"{spec.label}: round {done + 1}/{spec.config.rounds}{said}")
                if not run.active:
                    break
                if time.monotonic() > deadline:
                    client.stop_run(run_id)
                    raise TimeoutError(f"run {run_id} did not finish within {timeout_s:.0f} s")
                time.sleep(1.0)
    if run.status != "finished":
        raise RuntimeError(f"run {run_id} ended as {run.status}: {run.message}")
    summary_path = out_dir / safe_name(spec.label) / "summary.json"
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    return summary


def federation_up(
    config: ExperimentConfig,
    specs: list[MethodSpec],
    out_dir: Path,
    console: Console,
    timeout_s: float = 3600.0,
    runtime: str = DEFAULT_RUNTIME,
    tls: bool = False,
) -> list[dict[str, Any]]:
    """Prepare each client's data file, start the federation, run every spec, tear down.

    ``runtime``: how the client daemons run ClientApp messages (``--runtime`` of
    ``collabfl-client``); ``tls``: certificates for every role, TLS on every link."""
    check_user_code(specs)
    work_dir = out_dir / "federation"
    files = client_data(config, specs, out_dir)
    summaries, run_dirs = [], {}
    allowed = sorted({path for spec in specs for path in user_code(spec.config)})
    if config.data.source is not None:
        allowed = sorted({*allowed, config.data.source})
    with LocalFederation(
        work_dir, files, runtime=runtime, tls=tls, allow_imports=allowed
    ) as federation:
        security = f"TLS, certificates in {work_dir / 'tls'}" if tls else "insecure"
        console.print(
            f"federation up: {len(files)} clients online, coordinator {federation.service}"
            f" ({security})"
        )
        for spec in specs:
            summaries.append(run_on_federation(federation, spec, out_dir, console, timeout_s))
            run_dirs[spec.label] = out_dir / safe_name(spec.label)
    write_comparison(out_dir, summaries, run_dirs)
    print_results(summaries, console)
    console.print(f"run directory: {out_dir}")
    return summaries
