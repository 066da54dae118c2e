"""Tearing a LocalFederation down: its clients stop together, the coordinator after them;
the ports it chose for its daemons are its own until then."""

import socket
import threading
from pathlib import Path

import pytest

from collabfl.kernel.ports import HOLDS, LOOPBACK
from collabfl.launcher import federation as federation_module
from collabfl.launcher.federation import LocalFederation

pytestmark = pytest.mark.federation

CLIENTS = 3


class FakeProcess:
    def __init__(self, name: str) -> None:
        self.name = name


def test_clients_stop_together_before_the_coordinator(tmp_path: Path, monkeypatch) -> None:
    """Every client's stop has begun before any of them may finish (a barrier they all wait
    on), which a one-after-another teardown never reaches; the coordinator goes last."""
    together = threading.Barrier(CLIENTS, timeout=30)
    stopped: list[str] = []

    def stop_group(process: FakeProcess, grace_s: float) -> None:
        if process.name != "coordinator":
            together.wait()
        stopped.append(process.name)

    monkeypatch.setattr(federation_module, "stop_group", stop_group)
    files = [tmp_path / f"client-{k}.npz" for k in range(CLIENTS)]
    federation = LocalFederation(tmp_path / "work", files)
    names = ["coordinator", *(f"client-{k}" for k in range(CLIENTS))]
    federation.processes = {name: FakeProcess(name) for name in names}
    federation.stop()
    assert sorted(stopped[:CLIENTS]) == names[1:]
    assert stopped[CLIENTS:] == ["coordinator"]


def test_a_federation_that_never_started_stops_quietly(tmp_path: Path) -> None:
    LocalFederation(tmp_path / "work", [tmp_path / "client-0.npz"]).stop()


@pytest.mark.skipif(not HOLDS, reason="ports are held on Linux only")
def test_a_local_federation_holds_its_daemons_ports_from_construction_to_stop(
    tmp_path: Path,
) -> None:
    federation = LocalFederation(tmp_path / "work", [tmp_path / "client-0.npz"])
    ports = [
        federation.superlink_port, federation.service_port,
        *federation.peer_ports, *federation.runtime_ports,
    ]  # fmt: skip
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind((LOOPBACK, port))  # another program, or an outgoing connection
    federation.stop()
    for port in ports:
        with socket.socket() as other:
            other.bind((LOOPBACK, port))
