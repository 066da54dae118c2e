"""Contract (fails loudly on a Flower upgrade): the daemon's in-process Control API calls
(coordinator/superlink/superlink_control.py) against a real SuperLink started as the TLS daemon
starts it. They use Flower's ControlHttpClient, its request and answer messages, the PEM form
``flwr supernode register`` sends a key in, and the runtime-version headers the SuperLink
checks; that a SuperNode with a key registered this way joins is shown by the TLS
federation tests (tests/test_federation_tls.py)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app as cli_app
from collabfl.coordinator.gateway.fleet_gateway import LoopbackTLS, free_loopback_port
from collabfl.coordinator.member_status import _timestamp
from collabfl.coordinator.superlink.superlink_control import ControlError, SuperLinkControl, _utc
from collabfl.flower.supernode_key import ensure_supernode_key
from collabfl.kernel import exit_status
from collabfl.kernel.supervisor import stop_group
from tests.support.tls_superlink import TlsSuperLink

pytestmark = pytest.mark.federation


@pytest.fixture(scope="module")
def superlink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsSuperLink]:
    with TlsSuperLink(tmp_path_factory.mktemp("control") / "coordinator") as running:
        running.nodes()  # answers
        yield running


def _key(folder: Path) -> str:
    return ensure_supernode_key(folder)[1].read_text()


def test_contract_a_key_is_registered_listed_found_and_unregistered(superlink, tmp_path):
    control = superlink.control
    node = control.register(_key(tmp_path))
    listed = {n["node-id"]: n for n in control.nodes()}
    assert listed[str(node)]["status"] == "registered"
    assert listed[str(node)]["online-at"] == "N/A"

    with pytest.raises(ControlError, match=r"refused to register.*already in use"):
        control.register(_key(tmp_path))

    assert control.node_holding(_key(tmp_path)) == node
    assert control.node_holding(_key(tmp_path / "other")) is None

    control.unregister(node)
    assert {n["node-id"]: n["status"] for n in control.nodes()}[str(node)] == "unregistered"
    assert control.node_holding(_key(tmp_path)) is None
    with pytest.raises(ControlError, match=f"refused to unregister node {node}.*not found"):
        control.unregister(node)


def test_a_key_flower_cannot_read_is_refused_before_any_call(tmp_path):
    nobody = f"127.0.0.1:{free_loopback_port()}"  # a call would fail to connect instead
    control = SuperLinkControl(nobody, None)
    with pytest.raises(ControlError, match="not an OpenSSH public key"):
        control.register("ssh-ed25519 AAAA-not-a-key")
    rsa = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDD" + "A" * 168 + "="
    with pytest.raises(ControlError):
        control.register(rsa)


def test_a_superlink_with_another_certificate_is_not_asked(superlink, tmp_path):
    other = LoopbackTLS.ensure(tmp_path / "other")
    control = SuperLinkControl(superlink.control.address, other.ca)
    with pytest.raises(ControlError, match=r"could not list the SuperNodes at .*(SSL|certificate)"):
        control.nodes()
    control.close()


def test_a_superlink_asked_from_the_daemon_still_stops_on_sigterm(tmp_path):
    with TlsSuperLink(tmp_path / "coordinator") as superlink:
        superlink.nodes()
        superlink.control.register(_key(tmp_path))
        superlink.control.nodes()
        assert superlink.process is not None
        stop_group(superlink.process, grace_s=8.0)
        # Killed (SIGKILL) means it waited for a connection the daemon kept open.
        assert superlink.process.returncode != -signal.SIGKILL


def test_times_read_back_as_member_status_reads_flowers():
    assert _utc("") == "N/A"
    when = _timestamp(_utc("2026-11-26T05:30:00.250000+01:00"))
    assert when == datetime(2026, 11, 26, 4, 30, tzinfo=UTC).timestamp()


def test_a_superlink_that_does_not_listen_is_a_control_error():
    with socket.socket() as held:  # bound, never listening: connection refused
        held.bind(("127.0.0.1", 0))
        control = SuperLinkControl(f"127.0.0.1:{held.getsockname()[1]}", None)
        with pytest.raises(ControlError, match="could not list the SuperNodes"):
            control.nodes()


def test_register_supernode_without_a_started_daemon_says_so_and_binds_nothing(tmp_path):
    state_dir = tmp_path / "coordinator"
    state_dir.mkdir()
    _, public_key = ensure_supernode_key(tmp_path / "member")
    register = [
        "admin", "register-supernode", "--client-id", "1", "--key", str(public_key),
        "--state-dir", str(state_dir),
    ]  # fmt: skip
    result = CliRunner().invoke(cli_app, register)
    assert result.exit_code == exit_status.USAGE
    assert "has the coordinator daemon started with this --state-dir?" in result.output
    assert not (state_dir / "coordinator.db").exists()
