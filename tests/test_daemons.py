"""The daemons as processes: bad input stops them before anything starts, SIGTERM stops
them cleanly together with the Flower process they supervise, and a restart after a SIGKILL
kills what the killed daemon left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from federation_faults import command_line, process_tree, running_processes, still_running

from collabfl.client.data import ArrayDataset, ClientData
from collabfl.client.data.client_file import save_client_file
from collabfl.kernel.grants import generate_private_key, save_public_key

pytestmark = pytest.mark.federation


def _client_args(tmp_path: Path, data: Path, ports: list[int]) -> list[str]:
    """A client daemon's argv on the three reserved ``ports`` (SuperLink, peer, runtime)."""
    key = tmp_path / "grant.pub.pem"
    save_public_key(generate_private_key().public_key().public_bytes_raw(), key)
    superlink, peer, runtime = ports
    return [
        sys.executable, "-m", "collabfl.client.daemon", "--client-id", "0",
        "--data", str(data), "--state-dir", str(tmp_path / "state"),
        "--superlink", f"127.0.0.1:{superlink}", "--insecure",
        "--peer-listen", f"127.0.0.1:{peer}", "--peer-address", f"127.0.0.1:{peer}",
        "--runtime-port", str(runtime), "--coordinator-key", str(key),
    ]  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text()


def test_client_daemon_refuses_a_bad_data_file(tmp_path, reserve_ports):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    result = subprocess.run(
        _client_args(tmp_path, bad, reserve_ports(3)), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "not a collabfl client data file" in result.stderr
    assert not (tmp_path / "state" / "supernode.log").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--max-restarts", "-1"], "--max-restarts must be >= 0 (0: for ever), got -1"),
        (["--restart-backoff-max", "0"], "--restart-backoff-max must be a positive number"),
        (["--superlink", "coord.example.org"], "--superlink: 'coord.example.org' is not HOST:PORT"),
    ],
)
def test_client_daemon_refuses_bad_restart_and_address_flags(tmp_path, reserve_ports, flags, said):
    args = [*_client_args(tmp_path, _data_file(tmp_path), reserve_ports(3)), *flags]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert said in result.stderr
    assert not (tmp_path / "state" / "supernode.log").exists()


def _data_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    split = ArrayDataset(rng.normal(size=(8, 1, 40)).astype(np.float32), rng.integers(0, 10, 8))
    data = tmp_path / "c.npz"
    save_client_file(ClientData(0, split, split, split, False), data, num_classes=10, dataset="x")
    return data


def _wait(condition, what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit_s} s"
        time.sleep(0.2)


def test_client_daemon_stops_cleanly_on_sigterm(tmp_path, reserve_ports):
    process = subprocess.Popen(
        _client_args(tmp_path, _data_file(tmp_path), reserve_ports(3)), start_new_session=True
    )
    pid_file = tmp_path / "state" / "supernode.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    supernode = int(pid_file.read_text())
    assert _alive(supernode)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while _alive(supernode) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(supernode), "the SuperNode outlived its daemon"


def _is_executor(pid: int) -> bool:
    return "collabfl.flower.warm_executor" in command_line(pid)


def test_a_restarted_client_daemon_kills_what_its_killed_predecessor_left(tmp_path, reserve_ports):
    """SIGKILL the daemon (the SuperNode follows by its death signal): whatever of its
    process tree is left, its executor included, the restarted daemon kills before it
    starts its own SuperNode."""
    args = [
        *_client_args(tmp_path, _data_file(tmp_path), reserve_ports(3)),
        "--runtime",
        "subprocess",
    ]
    first = subprocess.Popen(args, start_new_session=True)
    _wait(lambda: any(map(_is_executor, process_tree(first.pid))), "the executor's start")
    killed = running_processes(process_tree(first.pid))
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    pid_file = tmp_path / "state" / "supernode.pid"
    supernode = int(pid_file.read_text())
    second = subprocess.Popen(args, start_new_session=True)
    try:
        _wait(lambda: int(pid_file.read_text() or supernode) != supernode, "a new SuperNode")
        assert not still_running(killed)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
        for pid in still_running(killed):  # without the fix: left on the machine otherwise
            os.kill(pid, signal.SIGKILL)


def test_the_executor_runs_with_one_malloc_arena(tmp_path, reserve_ports):
    """The executor is the process that fetches peer models; one glibc arena keeps the
    fetch's chunks from spreading over several (flower/processes.py, ``executor_env``)."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    daemon = subprocess.Popen(
        _client_args(tmp_path, _data_file(tmp_path), reserve_ports(3)),
        start_new_session=True,
        env=env,
    )
    try:
        _wait(lambda: any(map(_is_executor, process_tree(daemon.pid))), "the executor's start")
        executor = next(pid for pid in process_tree(daemon.pid) if _is_executor(pid))
        environment = Path(f"/proc/{executor}/environ").read_bytes().split(b"\0")
        assert b"MALLOC_ARENA_MAX=1" in environment
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
