"""The coordinator's SuperLink from the network: the Fleet API only, for registered keys.

A real coordinator daemon in TLS mode (a real SuperLink behind its Fleet gateway) is
attacked from the network side with the federation's CA certificate in hand: the Control
and Runtime APIs answer 403 (so nobody can ``flwr run`` a rogue ServerApp or read runs),
even through path tricks, while SuperNodes reach the Fleet API; a SuperNode whose key no
operator registered cannot join, a registered one joins as the node id bound to its client.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from federation_faults import wait_logged
from flwr.proto.control_pb2 import StopRunRequest
from typer.testing import CliRunner

from collabfl.cli.main import app as cli_app
from collabfl.coordinator.enrolment.operator_credential import FILE_NAME as OPERATOR_FILE
from collabfl.coordinator.enrolment.operator_credential import OperatorCredential
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.coordinator.superlink.local_superlink import flower_home, local_superlink_control
from collabfl.flower.processes import SUPERNODE_CONNECTED, flower_binary, flower_env
from collabfl.flower.supernode_key import ensure_supernode_key
from collabfl.kernel.ports import PortReservation
from collabfl.kernel.supervisor import stop_group
from tests.support.other_user import SYSTEM_PYTHON, as_stranger
from tests.support.pki import TestCA

pytestmark = pytest.mark.federation


class Coordinator:
    def __init__(self, tmp_path: Path) -> None:
        ca = TestCA()
        self.ca = ca.write_ca(tmp_path)
        cert, key = ca.coordinator().write(tmp_path, "coordinator")
        operator = ca.operator()
        operator_cert, operator_key = operator.write(tmp_path, "operator")
        self.state_dir = tmp_path / "coordinator"
        self.reserved = PortReservation(2)  # until the module's tests end
        self.gateway, service = self.reserved.ports
        self.operator = OperatorCredential(
            f"127.0.0.1:{service}", self.ca.read_bytes(), operator.cert, operator.key
        )
        """What a coordinator holding its CA key keeps in STATE/pki for `admin` there."""
        self.admin = [
            "--coordinator", f"127.0.0.1:{service}", "--ca", str(self.ca),
            "--cert", str(operator_cert), "--key", str(operator_key),
        ]  # fmt: skip
        """``collabfl admin``'s flags for this coordinator's operator."""
        command = [
            sys.executable, "-m", "collabfl.coordinator.daemon",
            "--state-dir", str(self.state_dir), "--host", "127.0.0.1",
            "--superlink-port", str(self.gateway), "--service-port", str(service),
            "--ssl-ca-certfile", str(self.ca), "--ssl-certfile", str(cert),
            "--ssl-keyfile", str(key),
        ]  # fmt: skip
        self.process = _spawn(command, tmp_path / "coordinator.log", os.environ)
        self.tls = ssl.create_default_context(cafile=str(self.ca))

    def request(self, method: str, path: str) -> int:
        """Status of a raw request to the public port, path sent exactly as given."""
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.gateway, context=self.tls, timeout=10
        )
        try:
            connection.request(method, path, body=b"" if method == "POST" else None)
            return connection.getresponse().status
        finally:
            connection.close()

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the coordinator daemon exited"
            try:
                if self.request("GET", "/health") == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError("the SuperLink behind the gateway never got healthy")

    def flwr(self, *args: str) -> dict:
        env = {**os.environ, **flower_env(flower_home(self.state_dir))}
        done = subprocess.run(
            [flower_binary("flwr"), *args, "collabfl", "--format", "json"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory) -> Iterator[Coordinator]:
    coordinator = Coordinator(tmp_path_factory.mktemp("gateway"))
    try:
        coordinator.wait_healthy()
        yield coordinator
    finally:
        stop_group(coordinator.process, grace_s=10.0)
        coordinator.reserved.release()


@pytest.mark.parametrize(
    "path",
    [
        "/v1/control/list-runs",
        "/v1/control/start-run",
        "/v1/control/register-node",
        "/v1/runtime/get-nodes",
        "/v1/runtime/pull-messages",
        "/v1/fleet/../control/list-runs",
        "/v1/fleet/%2e%2e/control/list-runs",
        "/v1/fleet//control/list-runs",
        "/docs",
        "/openapi.json",
    ],
)
def test_network_cannot_reach_control_or_runtime_api(coordinator, path):
    assert coordinator.request("POST", path) == 403
    assert coordinator.request("GET", path) == 403


def test_fleet_calls_are_forwarded(coordinator):
    # An empty Fleet call reaches the SuperLink, which refuses it itself (not the gateway).
    assert coordinator.request("POST", "/v1/fleet/pull-messages") not in (403, 404, 503)


def test_the_coordinator_itself_still_uses_the_control_api_on_loopback(coordinator):
    assert coordinator.flwr("ls")["success"] is True


KNOCK = """
import http.client, ssl, sys
host, port = sys.argv[1].rsplit(":", 1)
blind = ssl._create_unverified_context()
stop = bytes.fromhex(sys.argv[2])
for path, body in (("/v1/control/list-runs", b""), ("/v1/control/stop-run", stop)):
    try:
        link = http.client.HTTPSConnection(host, int(port), context=blind, timeout=10)
        link.request("POST", path, body=body, headers={"content-type": "application/protobuf"})
        answer = link.getresponse()
        print(path, answer.status, answer.read().decode(errors="replace").strip())
    except OSError as error:
        print(path, "refused", type(error).__name__)
"""
"""``curl -k`` from another local user: no CA, no credential, the loopback SuperLink's port."""


def test_another_local_user_cannot_list_or_stop_runs_on_the_loopback_superlink(coordinator):
    connection = tomllib.loads((flower_home(coordinator.state_dir) / "config.toml").read_text())
    address = connection["superlink"]["collabfl"]["address"]
    stop = StopRunRequest(run_id=1).SerializeToString().hex()
    done = subprocess.run(
        as_stranger([SYSTEM_PYTHON, "-c", KNOCK, address, stop]),
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    answers = done.stdout.splitlines()
    assert len(answers) == 2, done
    for answer in answers:  # before: list-runs 200 with the runs, stop-run Flower's own answer
        assert " 403 this SuperLink answers only the processes of its own user" in answer
    assert "refused a connection" in (coordinator.state_dir / "superlink.log").read_text()
    assert coordinator.flwr("ls")["success"] is True  # the coordinator's user still may


def _spawn(command: list[str], log_path: Path, env: Mapping[str, str]) -> subprocess.Popen:
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(
            command, env=dict(env), stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def _supernode(coordinator: Coordinator, state_dir: Path, port: int) -> subprocess.Popen:
    private_key, _ = ensure_supernode_key(state_dir)
    command = [
        flower_binary("flower-supernode"), "--superlink", f"127.0.0.1:{coordinator.gateway}",
        "--root-certificates", str(coordinator.ca), "--port", str(port),
        "--auth-supernode-private-key", str(private_key),
    ]  # fmt: skip
    env = {**os.environ, **flower_env(state_dir / "flwr")}
    return _spawn(command, state_dir / "supernode.log", env)


def test_only_a_registered_supernode_key_joins(coordinator, tmp_path, reserve_ports):
    member, rogue = tmp_path / "member", tmp_path / "rogue"
    for folder in (member, rogue):
        folder.mkdir()
    _, public_key = ensure_supernode_key(member)
    register = [
        "admin", *coordinator.admin, "register-supernode", "--client-id", "4",
        "--key", str(public_key),
    ]  # fmt: skip
    result = CliRunner().invoke(cli_app, register)
    assert result.exit_code == 0, result.output
    with CoordinatorState(coordinator.state_dir / "coordinator.db") as state:
        bindings = state.supernode_bindings()
    assert list(bindings.values()) == [4]

    ports = reserve_ports(2)
    pairs = zip((member, rogue), ports, strict=True)
    processes = [_supernode(coordinator, folder, port) for folder, port in pairs]
    try:
        deadline = time.monotonic() + 60
        online: list[int] = []
        while time.monotonic() < deadline and not online:
            nodes = coordinator.flwr("supernode", "list").get("nodes", [])
            online = [int(n["node-id"]) for n in nodes if n.get("status") == "online"]
            time.sleep(1.0)
        assert online == list(bindings)
        time.sleep(3.0)  # the rogue has had as long as the member needed, and more
        nodes = coordinator.flwr("supernode", "list").get("nodes", [])
        assert [int(n["node-id"]) for n in nodes if n.get("status") == "online"] == online
        assert "Failed to activate SuperNode" in (rogue / "supernode.log").read_text()
        refused = _wait_for_impostor_event(coordinator, "a SuperNode key no operator registered")
        assert refused.client_id is None
    finally:
        for process in processes:
            stop_group(process, grace_s=5.0)


def test_a_clients_new_key_unregisters_its_old_one(coordinator, tmp_path):
    """Re-registering a member's SuperNode (a rotated or stolen key) takes the old key out
    of the SuperLink, not only out of coordinator.db: before, it stayed registered and could
    join the Fleet until the coordinator restarted. The command goes through the service
    (an event says so), on the coordinator's machine or from anywhere."""
    nodes = []
    local_operator = coordinator.state_dir / "pki" / OPERATOR_FILE
    coordinator.operator.save(local_operator)  # as a coordinator that can issue keeps one
    for name, connection in (
        ("old", ["--state-dir", str(coordinator.state_dir)]),  # on its machine
        ("new", []),  # anywhere, with the operator's own credential
    ):
        (tmp_path / name).mkdir()
        _, public_key = ensure_supernode_key(tmp_path / name)
        flags = coordinator.admin if not connection else []
        register = [
            "admin", *flags, "register-supernode", "--client-id", "6", "--key",
            str(public_key), *connection,
        ]  # fmt: skip
        result = CliRunner().invoke(cli_app, register)
        assert result.exit_code == 0, result.output
        nodes.append(int(result.output.split("Flower node ", 1)[1].split()[0].rstrip(".")))
    old, new = nodes
    assert f"its old key, Flower node {old}, unregistered" in " ".join(result.output.split())
    with CoordinatorState(coordinator.state_dir / "coordinator.db") as state:
        assert {n: c for n, c in state.supernode_bindings().items() if c == 6} == {new: 6}
    control = local_superlink_control(coordinator.state_dir)
    try:
        status = {int(n["node-id"]): n["status"] for n in control.nodes()}
    finally:
        control.close()
    assert status[old] == "unregistered" and status[new] == "registered", status
    local_operator.unlink()
    with CoordinatorState(coordinator.state_dir / "coordinator.db") as state:
        said = [e.message for e in state.events() if e.kind == "supernode_registered"]
    assert any(f"its old key (Flower node {old}) is unregistered" in m for m in said), said


def _wait_for_impostor_event(coordinator: Coordinator, text: str, limit_s: float = 60.0):
    """The federation-wide ``impostor`` event whose message holds ``text``, once recorded."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with CoordinatorState(coordinator.state_dir / "coordinator.db") as state:
            found = [e for e in state.events() if e.kind == "impostor" and text in e.message]
        if found:
            assert found[0].run_id == "" and found[0].level == "warning"
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no impostor event saying {text!r} in {limit_s} s")


def test_a_stolen_member_key_is_refused_and_recorded_naming_the_member(
    coordinator, tmp_path, reserve_ports
):
    """A copy of member 5's SuperNode key, shown while member 5 is online: Flower refuses the
    activation before any ServerApp could see the node; the gateway records it."""
    member, thief = tmp_path / "member", tmp_path / "thief"
    thief.mkdir()
    private_key, public_key = ensure_supernode_key(member)
    for path in (private_key, public_key):
        shutil.copy2(path, thief / path.name)
    register = [
        "admin", *coordinator.admin, "register-supernode", "--client-id", "5",
        "--key", str(public_key),
    ]  # fmt: skip
    result = CliRunner().invoke(cli_app, register)
    assert result.exit_code == 0, result.output
    ports = reserve_ports(2)
    processes = [_supernode(coordinator, member, ports[0])]
    try:
        wait_logged(member / "supernode.log", SUPERNODE_CONNECTED)
        processes.append(_supernode(coordinator, thief, ports[1]))
        event = _wait_for_impostor_event(coordinator, "client 5's registered key")
        assert event.client_id == 5
        assert SUPERNODE_CONNECTED not in (thief / "supernode.log").read_text()
    finally:
        for process in processes:
            stop_group(process, grace_s=5.0)
