"""deploy/ runs the flow of docs/deployment.md: a coordinator that makes its own TLS, one
token per client, clients that join with it and restart from their saved settings. No
docker engine or service manager runs here, so each command is parsed by the parser of the
program it starts, and the mounts are checked for who may read what."""

from __future__ import annotations

import argparse
import http.server
import os
import re
import shlex
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import click
import pytest
import typer
import yaml

from collabfl.cli.main import app as collabfl_cli
from collabfl.client import daemon as client_daemon
from collabfl.client import join as client_join
from collabfl.coordinator import daemon as coordinator_daemon
from collabfl.coordinator.enrolment.operator_credential import FILE_NAME as OPERATOR_FILE
from collabfl.flower.processes import DEFAULT_RUNTIME
from collabfl.kernel import daemon_settings
from collabfl.kernel.devices import check_spec
from tests.support.pki import TestCA

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
CLIENT = re.compile(r"(gpu-)?client-\d+")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _coordinator(compose: dict) -> argparse.Namespace:
    command = compose["services"]["coordinator"]["command"]
    assert command[0] == "collabfl-coordinator"
    return coordinator_daemon.parser().parse_args(command[1:])


def _clients(compose: dict) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items() if CLIENT.fullmatch(name)}


def _invites(compose: dict) -> dict[str, dict]:
    """The services that mint tokens: those a client waits on besides prepare/coordinator."""
    names = {
        dependency
        for client in _clients(compose).values()
        for dependency in client["depends_on"]
        if dependency not in {"coordinator", "prepare"}
    }
    return {name: compose["services"][name] for name in names}


def _script(service: dict) -> tuple[str, list[str]]:
    """An ``sh -c`` service's script (Compose's ``$$`` read as the ``$`` sh gets) and args."""
    command = service["command"]
    assert command[:2] == ["sh", "-c"]
    return command[2].replace("$$", "$"), command[4:]


def _steps(script: str) -> list[list[str]]:
    """The script as words, split into simple commands and the operators between them."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    steps: list[list[str]] = [[]]
    for word in lexer:
        if word in {";", "||", "&&"}:
            steps += [[word], []]
        else:
            steps[-1].append(word)
    return steps


def _mounts(service: dict) -> dict[str, tuple[str, bool, str | None]]:
    """Container path -> (volume, read-only, subpath), short or long syntax."""
    mounts = {}
    for entry in service.get("volumes", []):
        if isinstance(entry, str):
            volume, target, *mode = entry.split(":")
            mounts[target] = (volume, mode == ["ro"], None)
        else:
            subpath = entry.get("volume", {}).get("subpath")
            mounts[entry["target"]] = (entry["source"], entry.get("read_only", False), subpath)
    return mounts


def _on_volume(service: dict, path: PurePosixPath) -> tuple[str, bool, PurePosixPath]:
    """The volume holding ``path`` in the service's container, read-only or not, and where
    in the volume it is."""
    for target, (volume, read_only, subpath) in _mounts(service).items():
        if path.is_relative_to(target):
            return volume, read_only, PurePosixPath(subpath or "") / path.relative_to(target)
    raise AssertionError(f"{path} is on no volume")


class Client:
    """What a client service's script runs, parsed by the programs' own parsers."""

    def __init__(self, service: dict) -> None:
        script, _ = _script(service)
        steps = _steps(script)
        # test -f SAVED -o -f LEGACY || join || exit ; exec collabfl-client --state-dir DIR
        assert [s[0] for s in steps[1::2]] == ["||", "||", ";"], script
        self.guard, join, stop, restart = steps[0::2]
        assert stop == ["exit"] and restart[0] == "exec", script
        assert self.guard[:2] == ["test", "-f"], script
        assert join[:2] == ["collabfl-client", "join"], script
        self.join, self.extras = client_join.parser().parse_known_args(join[2:])
        self.daemon = client_daemon.parser().parse_args(
            [*self.extras, "--state-dir", str(self.join.state_dir)]
        )
        assert restart[1] == "collabfl-client", script
        self.restart_argv = restart[2:]
        self.restart = client_daemon.parser().parse_args(self.restart_argv)
        assert self.join.token is None, script  # never on the command line
        self.token_file = PurePosixPath(self.join.token_file)


def _invited(compose: dict) -> dict[str, tuple[str, int, dict]]:
    """Client service -> (invite service, client id, the parsed `collabfl admin` line)."""
    found = {}
    for name, service in _invites(compose).items():
        script, pairs = _script(service)
        line = re.search(r"\$\((collabfl admin [^)]*)\)", script)[1]
        for pair in pairs:
            client_id, host = pair.split("=")
            argv = shlex.split(line.replace("$id", client_id).replace("$host", host))
            found[host] = (name, int(client_id), _parse_cli(argv[1:]))
    return found


def _parse_cli(argv: list[str]) -> dict:
    """``collabfl ARGV`` parsed by the CLI itself (nothing runs): its options at every level,
    and ``command``, the leaf command's name. Wrong flags raise click's UsageError."""
    command: click.Command = typer.main.get_command(collabfl_cli)
    ctx = command.make_context("collabfl", argv)
    params = {}
    while isinstance(command, click.Group):
        params.update(ctx.params)
        # click keeps the sub-command's name and arguments in _protected_args
        name, sub, rest = command.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        assert sub is not None
        command, ctx = sub, sub.make_context(name, rest, parent=ctx)
    return {**params, **ctx.params, "command": command.name}


def test_the_coordinator_makes_its_own_tls_for_the_name_clients_dial(compose):
    coordinator = _coordinator(compose)
    assert not coordinator.insecure
    assert coordinator.ssl_ca_certfile is None and coordinator.ssl_certfile is None
    assert coordinator.name == ["coordinator"]  # the compose service name
    assert coordinator.host == "0.0.0.0"


def test_every_client_joins_by_token_then_restarts_from_its_saved_settings(compose):
    coordinator = _coordinator(compose)
    clients = _clients(compose)
    assert len(clients) >= 4
    for name, service in clients.items():
        client = Client(service)
        assert client.join.coordinator == f"coordinator:{coordinator.superlink_port}", name
        assert client.join.no_start, name  # settings saved before the daemon runs
        assert "--insecure" not in client.extras, name
        assert not client.daemon.insecure, name
        # the guard is the settings file the join writes, in the state dir the restart reads
        # ... or the flags file an older collabfl wrote, which the daemon still reads
        saved = client.join.state_dir / daemon_settings.FILE_NAME
        legacy = client.join.state_dir / daemon_settings.LEGACY_FILE
        assert client.guard[2:] == [str(saved), "-o", "-f", str(legacy)], name
        assert client.restart_argv == ["--state-dir", str(client.join.state_dir)], name
        assert client.restart.state_dir == client.join.state_dir, name


def test_each_client_gets_the_token_minted_for_its_name(compose):
    coordinator = _coordinator(compose)
    invited = _invited(compose)
    clients = _clients(compose)
    assert set(invited) == set(clients)
    for name, service in clients.items():
        invite, client_id, admin = invited[name]
        assert invite in service["depends_on"], name
        assert admin["command"] == "invite"
        assert admin["client_id"] == client_id and admin["host"] == (name,), name
        assert admin["as_json"], name
        # The client reads the file the invite wrote for this host, and nothing else.
        client = Client(service)
        assert str(client.join.data) == f"/data/client-{client_id}.npz", name
        token_at = _on_volume(service, client.token_file)
        script, _ = _script(compose["services"][invite])
        written = PurePosixPath(re.search(r'> "(\S+/\$host/token)"', script)[1])
        written_at = _on_volume(compose["services"][invite], written)
        assert token_at[0] == written_at[0] and token_at[1], name
        assert token_at[2] == PurePosixPath(str(written_at[2]).replace("$host", name)), name
        # The coordinator's certificate carries the name the admin CLI dials.
        host, port = admin["coordinator"].rsplit(":", 1)
        assert host in coordinator.name and int(port) == coordinator.service_port
    ids = {
        profile: sorted(client_id for h, (i, client_id, _) in invited.items() if i == profile)
        for profile in {i for i, _, _ in invited.values()}
    }
    assert all(found == list(range(len(found))) for found in ids.values()), ids
    prepare = compose["services"]["prepare"]["command"]
    assert int(prepare[prepare.index("--clients") + 1]) == max(map(len, ids.values()))


def test_the_invite_job_reads_the_coordinators_own_operator_credential(compose):
    services = compose["services"]
    coordinator = _coordinator(compose)
    state = _on_volume(services["coordinator"], PurePosixPath(coordinator.state_dir))
    assert state[1] is False
    expected = PurePosixPath(coordinator.state_dir) / "pki" / OPERATOR_FILE
    for _, (invite, _, admin) in _invited(compose).items():
        volume, read_only, inside = _on_volume(services[invite], PurePosixPath(admin["credential"]))
        assert (volume, read_only) == (state[0], True), invite
        assert inside == expected.relative_to(coordinator.state_dir), invite


def test_no_client_mounts_coordinator_state_or_another_clients_token(compose):
    """The coordinator's state holds the CA key and the grant signing key: a container that
    read them could issue itself any identity or grant. A token is a one-time identity."""
    services = compose["services"]
    coordinator = _coordinator(compose)
    state_volume = _on_volume(services["coordinator"], PurePosixPath(coordinator.state_dir))[0]
    invited = _invited(compose)
    token_volumes = {
        _on_volume(services[invite], PurePosixPath("/tokens"))[0]
        for invite, _, _ in invited.values()
    }
    assert state_volume not in token_volumes
    state_volumes = []
    for name, service in _clients(compose).items():
        for target, (volume, read_only, subpath) in _mounts(service).items():
            assert volume != state_volume, name
            if volume in token_volumes:
                assert (subpath, read_only) == (name, True), f"{name} mounts {target}"
        client = Client(service)
        state_volumes.append(_on_volume(service, PurePosixPath(client.join.state_dir))[0])
    assert len(set(state_volumes)) == len(state_volumes)
    assert not token_volumes & set(state_volumes)


def test_the_gpu_profile_gives_each_client_its_own_gpu(compose):
    services = compose["services"]
    gpu = {name: s for name, s in _clients(compose).items() if name.startswith("gpu-")}
    assert len(gpu) == 2
    invited = _invited(compose)
    for name, service in gpu.items():
        assert service["profiles"] == ["gpu"], name
        reserved = service["deploy"]["resources"]["reservations"]["devices"]
        assert reserved == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
        device = check_spec(Client(service).daemon.device)
        assert device == f"cuda:{invited[name][1]}", name  # one GPU each, by client id
        for dependency in service["depends_on"]:
            assert services[dependency].get("profiles") in (None, ["gpu"]), dependency
    for name, service in _clients(compose).items():
        if name not in gpu:
            assert "profiles" not in service and not Client(service).daemon.device, name


def test_dockerfile_exposes_every_port(compose):
    exposed = set(re.search(r"EXPOSE ([\d ]+)", (DEPLOY / "Dockerfile").read_text())[1].split())
    coordinator = _coordinator(compose)
    needed = {coordinator.superlink_port, coordinator.service_port}
    for service in _clients(compose).values():
        client = Client(service)
        needed |= {int(client.join.peer_listen.rsplit(":", 1)[1]), client.daemon.runtime_port}
    assert {str(port) for port in needed} <= exposed


def test_every_volume_a_service_writes_is_owned_by_the_image_user(compose):
    """A fresh named volume takes its mount point's owner; one left to root could not be
    written by the daemons, which run as the image's user."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    user = re.search(r"^USER (\S+)$", dockerfile, re.MULTILINE)[1]
    owned = set(re.search(rf"chown {user} ([^\n]+)", dockerfile)[1].split())
    made = set(re.search(r"mkdir -p ([^\\\n]+)", dockerfile)[1].split())
    for name, service in compose["services"].items():
        for target, (_, read_only, subpath) in _mounts(service).items():
            if not read_only and subpath is None:
                assert target in owned & made, f"{name} writes {target}"


def test_every_service_is_built_restarted_and_reaped(compose):
    services = compose["services"]
    one_shots = {
        dependency
        for service in services.values()
        for dependency, wait in service.get("depends_on", {}).items()
        if wait["condition"] == "service_completed_successfully"
    }
    assert one_shots == {"prepare", *_invites(compose)}
    for name, service in services.items():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}, name
        assert service["init"] is True, name
        one_shot = name in one_shots
        assert service["restart"] == ("on-failure" if one_shot else "unless-stopped"), name
        assert ("healthcheck" in service) is not one_shot, name
        if not one_shot:
            probe = service["healthcheck"]["test"]
            assert probe[:3] == ["CMD", "python", "/opt/collabfl/deploy/probe.py"], name


def test_health_probes_check_the_ports_the_daemons_serve(compose):
    services = compose["services"]
    coordinator = _coordinator(compose)
    assert services["coordinator"]["healthcheck"]["test"][3:] == [
        f"https://127.0.0.1:{coordinator.superlink_port}/health",
        f"tcp://127.0.0.1:{coordinator.service_port}",
    ]
    for name, service in _clients(compose).items():
        port = Client(service).join.peer_listen.rsplit(":", 1)[1]
        assert service["healthcheck"]["test"][3:] == [f"tcp://127.0.0.1:{port}"], name


def _exec_start(unit: str) -> list[str]:
    text = (DEPLOY / "systemd" / unit).read_text()
    return shlex.split(re.search(r"^ExecStart=(.+)$", text, re.MULTILINE)[1])


def test_the_systemd_units_start_the_daemons_with_flags_they_take():
    coordinator = _exec_start("collabfl-coordinator.service")
    assert coordinator[0].endswith("/collabfl-coordinator")
    args = coordinator_daemon.parser().parse_args(coordinator[1:])
    assert not args.insecure and args.name and args.host == "0.0.0.0"
    client = _exec_start("collabfl-client.service")
    assert client[0].endswith("/collabfl-client")
    assert client[1:] == [
        "--state-dir",
        str(client_daemon.parser().parse_args(client[1:]).state_dir),
    ]
    # the unit's comment enrols into the state dir the unit then starts from
    text = (DEPLOY / "systemd" / "collabfl-client.service").read_text()
    join_line = re.search(r"(collabfl-client join .*?--no-start)", text, re.DOTALL)[1]
    join_argv = shlex.split(join_line.replace("#", "").replace("\\\n", " "))
    joined, extras = client_join.parser().parse_known_args(join_argv[2:])
    assert extras == [] and joined.no_start
    assert client[1:] == ["--state-dir", str(joined.state_dir)]


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
    assert dockerfile.index("pip install -r") < dockerfile.index("COPY collabfl collabfl")
    assert "COPY examples examples" in dockerfile


def test_the_build_context_leaves_out_local_state():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "runs", "tests"} <= ignored


def _health_server(tls: ssl.SSLContext | None) -> http.server.HTTPServer:
    """A server on loopback answering /health with 200 and anything else with 404."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def health_server() -> Iterator[int]:
    server = _health_server(None)
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def tls_health_server(tmp_path) -> Iterator[int]:
    """The same over TLS, with a certificate from a CA the probe has never seen (as the
    coordinator's own, made on its first start)."""
    cert, key = TestCA().coordinator().write(tmp_path, "coordinator")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = _health_server(tls)
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _probe(*targets: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(DEPLOY / "probe.py"), "--timeout", "2", *targets]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_the_probe_passes_only_when_every_target_answers(health_server, tls_health_server):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        dead = closed.getsockname()[1]
        healthy = f"http://127.0.0.1:{health_server}/health"
        healthy_tls = f"https://127.0.0.1:{tls_health_server}/health"
        listening = f"tcp://127.0.0.1:{health_server}"
        assert _probe(healthy, healthy_tls, listening).returncode == 0
        for broken in (
            f"http://127.0.0.1:{health_server}/missing",
            f"https://127.0.0.1:{tls_health_server}/missing",
            f"https://127.0.0.1:{health_server}/health",  # plain HTTP where TLS is asked for
            f"tcp://127.0.0.1:{dead}",
            "ftp://127.0.0.1:21",
        ):
            result = _probe(healthy, broken)
            assert result.returncode == 1, broken
            assert result.stderr.startswith(broken), result.stderr
    finally:
        closed.close()


def _own_loader() -> dict:
    return yaml.safe_load((DEPLOY / "own-loader.yml").read_text())


def _in_image(path: str) -> Path:
    """The checkout's file that the Dockerfile copies to ``path`` (WORKDIR /opt/collabfl)."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "WORKDIR /opt/collabfl" in dockerfile and "COPY examples examples" in dockerfile
    return ROOT / PurePosixPath(path).relative_to("/opt/collabfl")


def test_the_own_loader_override_joins_each_client_with_its_factory(compose):
    override = _own_loader()["services"]
    assert set(override) == {n for n in _clients(compose) if not n.startswith("gpu-")}
    for name, service in override.items():
        client, base = Client(service), Client(compose["services"][name])
        factory = client.join.data
        assert isinstance(factory, str) and factory in client.join.allow_import, name
        # everything else as the demo client joins and restarts
        assert vars(client.join) | {"data": None, "allow_import": None} == vars(base.join) | {
            "data": None,
            "allow_import": None,
        }, name
        assert client.restart_argv == base.restart_argv, name
        # the module is in the image, on PYTHONPATH (the working directory is not searched)
        module, attribute = factory.split(":")
        folder = _in_image(service["environment"]["PYTHONPATH"])
        assert f"def {attribute}(" in (folder / f"{module}.py").read_text(), name
        # the images: a read-only bind of a folder the operator must name
        (volume,) = service["volumes"]
        assert volume["target"] == service["environment"]["PNG_FOLDER"] and volume["read_only"]
        assert volume["source"].startswith("${PNG_DIR:?"), name


def test_the_own_loader_override_passes_the_daemons_own_data_check(tmp_path):
    service = _own_loader()["services"]["client-1"]
    env = dict(service["environment"])
    images = tmp_path / "png"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "write_png_folder.py"), "--out", str(images),
         "--clients", "3", "--train", "8", "--test", "4"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    env["PYTHONPATH"] = str(_in_image(env["PYTHONPATH"]))
    env["PNG_FOLDER"] = str(images)  # where the bind mount puts PNG_DIR
    factory = Client(service).join.data
    doctor = Path(sys.executable).with_name("collabfl")
    checked = subprocess.run(
        [str(doctor), "doctor", "--data", factory, "--client-id", "1"],
        cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert f"✓ data.source {factory}: client 1" in checked.stdout, checked.stdout + checked.stderr


def test_every_compose_client_serves_messages_from_a_warm_executor(compose):
    # A process per message imports torch, loads the data and, on a GPU client, sets up
    # CUDA again for every message: a 4-client round took 3.7-4.5 s that way against
    # about 0.5 s warm on the same machine (docs/performance.md).
    services = {**_clients(compose), **_own_loader()["services"]}
    for name, service in services.items():
        assert Client(service).daemon.runtime == DEFAULT_RUNTIME == "warm", name
