"""``collabfl federation up``: a whole federation as real processes on this machine.

The same topology as a multi-machine deployment, on loopback: one ``collabfl-coordinator``
(SuperLink + coordinator service + ServerApp launcher) and N ``collabfl-client`` daemons
(SuperNode + peer server), each with its own data file and state directory. It waits until
every node is online, runs the configured methods through the coordinator service exactly
as an operator would, writes the same run directory as ``collabfl simulate``, and stops
only the processes it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from collabfl.client.data.client_file import save_client_file
from collabfl.coordinator.config import ExperimentConfig
from collabfl.coordinator.experiment import prepare_data
from collabfl.coordinator.methods import MethodSpec, run_request
from collabfl.coordinator.recording import safe_name
from collabfl.coordinator.report.comparison import write_comparison
from collabfl.coordinator.report.table import print_results
from collabfl.coordinator.run_options import RunOptions
from collabfl.coordinator.service_client import CoordinatorClient, CoordinatorUnreachable
from collabfl.flower.processes import flower_binary, flower_env
from collabfl.kernel.supervisor import stop_group

HOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """Ports the OS reports free right now (loopback)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def coordinator_command(state_dir: Path, superlink_port: int, service_port: int) -> list[str]:
    return [
        sys.executable, "-m", "collabfl.coordinator.daemon",
        "--state-dir", str(state_dir), "--host", HOST, "--insecure",
        "--superlink-port", str(superlink_port), "--service-port", str(service_port),
    ]  # fmt: skip


def client_command(
    client_id: int,
    data: Path,
    state_dir: Path,
    superlink: str,
    peer_port: int,
    runtime_port: int,
    key: Path,
    runtime: str = "subprocess",
) -> list[str]:
    return [
        sys.executable, "-m", "collabfl.client.daemon",
        "--client-id", str(client_id), "--data", str(data), "--state-dir", str(state_dir),
        "--superlink", superlink, "--insecure",
        "--peer-listen", f"{HOST}:{peer_port}", "--peer-address", f"{HOST}:{peer_port}",
        "--runtime-port", str(runtime_port), "--coordinator-key", str(key),
        "--runtime", runtime,
    ]  # fmt: skip


@dataclass
class LocalFederation:
    """Starts and stops the processes of a loopback federation; a context manager.

    ``runtime``: how the client daemons run ClientApp messages (flower/processes.py's
    CLIENT_RUNTIMES).
    """

    work_dir: Path
    client_files: list[Path]
    runtime: str = "subprocess"
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.client_files)
        ports = free_ports(2 + 2 * n)
        self.superlink_port, self.service_port = ports[:2]
        self.peer_ports, self.runtime_ports = ports[2 : 2 + n], ports[2 + n :]
        self.coordinator_dir = self.work_dir / "coordinator"
        self.service = f"{HOST}:{self.service_port}"

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
        self._spawn(
            "coordinator",
            coordinator_command(self.coordinator_dir, self.superlink_port, self.service_port),
        )
        self._wait_ready(timeout_s)
        key = self.coordinator_dir / "grant_key.pub.pem"
        for k, data in enumerate(self.client_files):
            self.start_client(k, data, key)
        self.wait_online(len(self.client_files), timeout_s)

    def start_client(self, k: int, data: Path, key: Path) -> None:
        command = client_command(
            k,
            data,
            self.work_dir / f"client-{k}",
            f"{HOST}:{self.superlink_port}",
            self.peer_ports[k],
            self.runtime_ports[k],
            key,
            self.runtime,
        )
        self._spawn(f"client-{k}", command)

    def _spawn(self, name: str, command: list[str]) -> None:
        log_path = self.work_dir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            self.processes[name] = subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.commands[name] = command

    def kill(self, name: str) -> None:
        """SIGKILL one daemon (a crash, not a shutdown); its Flower child follows it."""
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def restart(self, name: str) -> None:
        """Start a killed daemon again with the same command (same state directory)."""
        self._spawn(name, self.commands[name])

    def _wait_ready(self, timeout_s: float) -> None:
        """The coordinator service answers and the SuperLink reports healthy."""
        deadline = time.monotonic() + timeout_s
        health = f"http://{HOST}:{self.superlink_port}/health"
        while time.monotonic() < deadline:
            self._check_alive("coordinator")
            try:
                with CoordinatorClient(self.service, timeout_s=2) as client:
                    client.status()
                with urllib.request.urlopen(health, timeout=2) as response:
                    if response.status == 200:
                        return
            except (CoordinatorUnreachable, OSError):
                time.sleep(0.5)
        raise TimeoutError(f"the coordinator was not ready within {timeout_s:.0f} s")

    def wait_online(self, expected: int, timeout_s: float) -> None:
        """Poll the SuperLink until ``expected`` SuperNodes are online."""
        deadline = time.monotonic() + timeout_s
        online = 0
        while time.monotonic() < deadline:
            for name in self.processes:
                self._check_alive(name)
            online = len(self.online_nodes())
            if online >= expected:
                return
            time.sleep(1.0)
        raise TimeoutError(f"{online} of {expected} clients online after {timeout_s:.0f} s")

    def online_nodes(self) -> list[dict[str, Any]]:
        env = {**os.environ, **flower_env(self.coordinator_dir / "flwr")}
        result = subprocess.run(
            [flower_binary("flwr"), "supernode", "list", "collabfl", "--format", "json"],
            capture_output=True, text=True, env=env, timeout=30, check=False,
        )  # fmt: skip
        try:
            nodes = json.loads(result.stdout).get("nodes", [])
        except json.JSONDecodeError:
            return []
        return [n for n in nodes if n.get("status") == "online"]

    def _check_alive(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is not None:
            log_path = self.work_dir / "logs" / f"{name}.log"
            raise RuntimeError(f"{name} exited with {process.returncode}; see {log_path}")

    def stop(self) -> None:
        """Clients first, then the coordinator; only what this object started."""
        for name in sorted(self.processes, key=lambda n: n == "coordinator"):
            stop_group(self.processes[name], grace_s=15.0)

    def client(self) -> CoordinatorClient:
        return CoordinatorClient(self.service, timeout_s=10)


def write_client_files(
    config: ExperimentConfig, folder: Path, partition_path: Path | None = None
) -> list[Path]:
    """One data file per client (``client-K.npz``) from the config's dataset and partition.

    In a real deployment every participant brings its own file; this makes demo ones.
    """
    data = prepare_data(config)
    (partition_path or folder / "partition.npz").parent.mkdir(parents=True, exist_ok=True)
    data.partition.save(partition_path or folder / "partition.npz")
    files = []
    for client in data.clients:
        path = folder / f"client-{client.client_id}.npz"
        save_client_file(client, path, num_classes=data.pool.num_classes, dataset=data.pool.name)
        files.append(path)
    return files


def run_on_federation(
    federation: LocalFederation,
    spec: MethodSpec,
    out_dir: Path,
    console: Console,
    timeout_s: float,
) -> dict[str, Any]:
    """Create one run through the coordinator service and wait for it to end."""
    run_id = f"{safe_name(spec.label)}-{int(time.time())}"
    options = RunOptions(len(federation.client_files), out_dir=str(out_dir.resolve()))
    config = run_request(spec, options)
    deadline = time.monotonic() + timeout_s
    with CoordinatorClient(federation.service, timeout_s=10) as client:
        client.create_run(run_id, spec.label, config)
        with console.status(f"{spec.label}: starting") as status:
            while True:
                run = client.get_run(run_id)
                done = -1 if run.last_completed_round is None else run.last_completed_round
                status.update(f"{spec.label}: round {done + 1}/{spec.config.rounds}")
                if not run.active:
                    break
                if time.monotonic() > deadline:
                    client.stop_run(run_id)
                    raise TimeoutError(f"run {run_id} did not finish within {timeout_s:.0f} s")
                time.sleep(1.0)
    if run.status != "finished":
        raise RuntimeError(f"run {run_id} ended as {run.status}: {run.message}")
    summary_path = out_dir / safe_name(spec.label) / "summary.json"
    return json.loads(summary_path.read_text())


def federation_up(
    config: ExperimentConfig,
    specs: list[MethodSpec],
    out_dir: Path,
    console: Console,
    timeout_s: float = 3600.0,
    runtime: str = "subprocess",
) -> list[dict[str, Any]]:
    """Prepare each client's data file, start the federation, run every spec, tear down.

    ``runtime``: how the client daemons run ClientApp messages (``--runtime`` of
    ``collabfl-client``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    work_dir = out_dir / "federation"
    files = write_client_files(config, work_dir / "data", partition_path=out_dir / "partition.npz")
    summaries, run_dirs = [], {}
    with LocalFederation(work_dir, files, runtime=runtime) as federation:
        console.print(
            f"federation up: {len(files)} clients online, coordinator {federation.service}"
        )
        for spec in specs:
            summaries.append(run_on_federation(federation, spec, out_dir, console, timeout_s))
            run_dirs[spec.label] = out_dir / safe_name(spec.label)
    write_comparison(out_dir, summaries, run_dirs)
    print_results(summaries, console)
    console.print(f"run directory: {out_dir}")
    return summaries
