"""``federation up --tls``: the certificates it issues and the TLS flags each daemon gets."""

from __future__ import annotations

import stat

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.client import daemon as client_daemon
from collabfl.coordinator import daemon as coordinator_daemon
from collabfl.coordinator.service import serve
from collabfl.coordinator.service_client import CoordinatorClient
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.kernel.grants import GrantSigner, generate_private_key
from collabfl.kernel.identity import Identity, Role, identity_of_pem
from collabfl.kernel.tls import ServerTLS
from collabfl.launcher.federation import client_command, coordinator_command
from collabfl.launcher.federation_tls import OPERATOR, FederationCredentials

pytestmark = pytest.mark.federation


def _issue(tmp_path) -> FederationCredentials:
    return FederationCredentials.issue(tmp_path / "tls", "10.9.0.2", {0: "10.9.0.3", 1: "10.9.0.4"})


def test_one_certificate_per_role_with_private_keys_kept_private(tmp_path):
    tls = _issue(tmp_path)
    assert identity_of_pem(tls.coordinator.cert.read_bytes()) == Identity(
        Role.COORDINATOR, "10.9.0.2"
    )
    assert identity_of_pem(tls.operator.cert.read_bytes()) == Identity(Role.OPERATOR, OPERATOR)
    for k, pair in tls.members.items():
        assert identity_of_pem(pair.cert.read_bytes()) == Identity.member(k)
    keys = [tls.coordinator.key, tls.operator.key, *(p.key for p in tls.members.values())]
    assert all(stat.S_IMODE(key.stat().st_mode) == 0o600 for key in keys)


def _flags(command: list[str]) -> list[str]:
    """A ``python -P -m MODULE FLAGS`` command's flags."""
    return command[command.index("-m") + 2 :]


def test_daemon_commands_carry_the_role_certificates(tmp_path):
    tls = _issue(tmp_path)
    started = coordinator_command(tmp_path, 1, 2, "10.9.0.2", tls)
    coordinator = coordinator_daemon.parser().parse_args(_flags(started))
    assert not coordinator.insecure and coordinator.host == "10.9.0.2"
    assert (coordinator.ssl_ca_certfile, coordinator.ssl_certfile) == (tls.ca, tls.coordinator.cert)
    assert coordinator.ssl_keyfile == tls.coordinator.key
    command = client_command(
        1, tmp_path, tmp_path, "10.9.0.2:1", 5, 6, tmp_path, "warm", "10.9.0.4", tls
    )
    client = client_daemon.parser().parse_args(_flags(command))
    assert not client.insecure and client.peer_listen == client.peer_address == "10.9.0.4:5"
    assert client.root_certificates == tls.ca  # also its peer server's client CA
    assert (client.peer_cert, client.peer_key) == (tls.members[1].cert, tls.members[1].key)


def test_the_operator_reaches_a_coordinator_serving_its_certificate(tmp_path):
    tls = FederationCredentials.issue(tmp_path / "tls", "127.0.0.1", {})
    state = CoordinatorState(tmp_path / "coordinator.db")
    server_tls = ServerTLS.from_files(tls.coordinator.cert, tls.coordinator.key, tls.ca)
    server, port = serve(state, GrantSigner(generate_private_key()), "127.0.0.1:0", server_tls)
    try:
        with CoordinatorClient(f"127.0.0.1:{port}", tls=tls.operator_tls()) as client:
            assert client.status().num_runs == 0
    finally:
        server.stop(grace=None)
        state.close()


def test_federation_up_offers_tls():
    result = CliRunner().invoke(app, ["federation", "up", "--help"])
    assert "--tls" in result.output and "--insecure" in result.output
