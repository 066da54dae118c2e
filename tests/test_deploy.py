"""deploy/ describes the same topology as ``collabfl federation up`` (no docker engine here,
so the files are checked against the process launcher instead of being run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from collabfl.client import daemon as client_daemon
from collabfl.coordinator import daemon as coordinator_daemon
from collabfl.coordinator.federation import client_command, coordinator_command

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _flags(command: list[str]) -> set[str]:
    return {part for part in command if part.startswith("--")}


def _clients(compose: dict) -> dict[str, list[str]]:
    return {
        name: service["command"]
        for name, service in compose["services"].items()
        if name.startswith("client-")
    }


def test_coordinator_matches_the_process_launcher(compose):
    command = compose["services"]["coordinator"]["command"]
    assert command[0] == "collabfl-coordinator"
    args = coordinator_daemon.parser().parse_args(command[1:])
    launched = coordinator_command(Path("/state"), 9093, 9300)
    assert _flags(launched) <= _flags(command)
    assert args.superlink_port == coordinator_daemon.parser().get_default("superlink_port")
    assert args.service_port == coordinator_daemon.parser().get_default("service_port")
    assert args.advertise == f"coordinator:{args.service_port}"


def test_clients_match_the_process_launcher(compose):
    coordinator = coordinator_daemon.parser().parse_args(
        compose["services"]["coordinator"]["command"][1:]
    )
    clients = _clients(compose)
    assert len(clients) >= 2
    launched = client_command(0, Path("d"), Path("s"), "h:1", 2, 3, Path("k"))
    ids = set()
    for name, command in clients.items():
        assert command[0] == "collabfl-client"
        args = client_daemon.parser().parse_args(command[1:])
        assert _flags(command) == _flags(launched), name
        assert name == f"client-{args.client_id}"
        assert str(args.data) == f"/data/client-{args.client_id}.npz"
        assert args.superlink == f"coordinator:{coordinator.superlink_port}"
        assert args.peer_address == f"{name}:{args.peer_listen.rsplit(':', 1)[1]}"
        assert args.runtime_port == client_daemon.parser().get_default("runtime_port")
        assert str(args.coordinator_key).endswith("grant_key.pub.pem")
        ids.add(args.client_id)
    assert ids == set(range(len(clients)))
    prepare = compose["services"]["prepare"]["command"]
    assert prepare[prepare.index("--clients") + 1] == str(len(clients))


def test_dockerfile_exposes_every_port(compose):
    exposed = set(re.search(r"EXPOSE ([\d ]+)", (DEPLOY / "Dockerfile").read_text())[1].split())
    coordinator = coordinator_daemon.parser().parse_args(
        compose["services"]["coordinator"]["command"][1:]
    )
    client = client_daemon.parser().parse_args(next(iter(_clients(compose).values()))[1:])
    needed = {
        coordinator.superlink_port,
        coordinator.service_port,
        int(client.peer_listen.rsplit(":", 1)[1]),
        client.runtime_port,
    }
    assert {str(port) for port in needed} <= exposed
