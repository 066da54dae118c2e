"""deploy/ describes the same topology as ``collabfl federation up`` (no docker engine here,
so the files are checked against the process launcher instead of being run)."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
import yaml

from collabfl.client import daemon as client_daemon
from collabfl.coordinator import daemon as coordinator_daemon
from collabfl.coordinator.federation import client_command, coordinator_command

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


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


def _mounts(service: dict) -> dict[str, tuple[str, bool]]:
    """Container path -> (volume, read-only) for a service's short-syntax volumes."""
    mounts = {}
    for entry in service.get("volumes", []):
        volume, target, *mode = entry.split(":")
        mounts[target] = (volume, mode == ["ro"])
    return mounts


def _volume_at(service: dict, path: PurePosixPath) -> tuple[str, bool]:
    """The volume (and whether read-only) holding ``path`` inside the service's container."""
    for target, mounted in _mounts(service).items():
        if path.is_relative_to(target):
            return mounted
    raise AssertionError(f"{path} is on no volume")


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


def test_clients_cannot_read_the_grant_signing_key(compose, tmp_path):
    """A client container that could read grant_key.pem could sign itself any grant."""
    services = compose["services"]
    coordinator = services["coordinator"]
    args = coordinator_daemon.parser().parse_args(coordinator["command"][1:])
    state_volume, _ = _volume_at(coordinator, PurePosixPath(args.state_dir))
    public_volume, _ = _volume_at(coordinator, PurePosixPath(args.public_dir))
    assert public_volume != state_volume
    for name, command in _clients(compose).items():
        client = client_daemon.parser().parse_args(command[1:])
        assert state_volume not in {volume for volume, _ in _mounts(services[name]).values()}
        key_path = PurePosixPath(client.coordinator_key)
        assert key_path.name == coordinator_daemon.PUBLIC_KEY_FILE, name
        assert _volume_at(services[name], key_path) == (public_volume, True), name
    # and the public folder receives the public key alone
    (tmp_path / "state").mkdir()
    coordinator_daemon.grant_signer(tmp_path / "state", tmp_path / "public")
    assert [p.name for p in (tmp_path / "public").iterdir()] == [coordinator_daemon.PUBLIC_KEY_FILE]
    public_key = (tmp_path / "public" / coordinator_daemon.PUBLIC_KEY_FILE).read_bytes()
    assert public_key == (tmp_path / "state" / coordinator_daemon.PUBLIC_KEY_FILE).read_bytes()


def test_every_service_is_built_restarted_and_reaped(compose):
    for name, service in compose["services"].items():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}, name
        assert service["init"] is True, name
        one_shot = name == "prepare"
        assert service["restart"] == ("on-failure" if one_shot else "unless-stopped"), name
        if not one_shot:
            probe = service["healthcheck"]["test"]
            assert probe[:3] == ["CMD", "python", "/opt/collabfl/deploy/probe.py"], name


def test_health_probes_check_the_ports_the_daemons_serve(compose):
    services = compose["services"]
    coordinator = coordinator_daemon.parser().parse_args(services["coordinator"]["command"][1:])
    assert services["coordinator"]["healthcheck"]["test"][3:] == [
        f"http://127.0.0.1:{coordinator.superlink_port}/health",
        f"tcp://127.0.0.1:{coordinator.service_port}",
    ]
    for name, command in _clients(compose).items():
        client = client_daemon.parser().parse_args(command[1:])
        port = client.peer_listen.rsplit(":", 1)[1]
        assert services[name]["healthcheck"]["test"][3:] == [f"tcp://127.0.0.1:{port}"], name


def test_published_ports_are_bound_to_loopback(compose):
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), name


def test_the_image_installs_the_cpu_torch_wheel_before_the_source():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    default_index = re.search(r"ARG TORCH_INDEX_URL=(\S+)", dockerfile)[1]
    assert default_index == "https://download.pytorch.org/whl/cpu"
    assert '--index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION"' in dockerfile
    version = re.search(r"ARG TORCH_VERSION=(\S+)", dockerfile)[1]
    assert f"torch=={version}" in (ROOT / "requirements.txt").read_text().split()
    assert dockerfile.index("pip install -r") < dockerfile.index("COPY client client")
    assert "COPY examples examples" in dockerfile


def test_the_build_context_leaves_out_local_state():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "runs", "tests"} <= ignored


@pytest.fixture
def health_server() -> Iterator[int]:
    """An HTTP server on loopback answering /health with 200 and anything else with 404."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _probe(*targets: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(DEPLOY / "probe.py"), "--timeout", "2", *targets]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_the_probe_passes_only_when_every_target_answers(health_server):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        dead = closed.getsockname()[1]
        healthy = f"http://127.0.0.1:{health_server}/health"
        listening = f"tcp://127.0.0.1:{health_server}"
        assert _probe(healthy, listening).returncode == 0
        for broken in (
            f"http://127.0.0.1:{health_server}/missing",
            f"tcp://127.0.0.1:{dead}",
            "ftp://127.0.0.1:21",
        ):
            result = _probe(healthy, broken)
            assert result.returncode == 1, broken
            assert result.stderr.startswith(broken), result.stderr
    finally:
        closed.close()
