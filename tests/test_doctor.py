"""``collabfl doctor``: one line per check, ✓ or ✗ with the fix, exit 1 when any fails.

Against a real TLS coordinator daemon started here (its Fleet gateway and service), every
check passes (its test certificates expire within days: a warning, not a failure); against
a closed port, a certificate without the name dialled, another CA, a clock off by a minute
and a malformed data file, the checks fail, each saying what to do.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from typer.testing import CliRunner

from collabfl.cli.doctor_local import STATE_ENV, package_version, state_dirs
from collabfl.cli.main import app
from tests.support.client_data import spoil, write_client_data
from tests.support.pki import TestCA
from tests.support.tls_federation import TlsCoordinator, TlsStub, credentials

pytestmark = pytest.mark.federation


def _doctor(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["doctor", *args])
    return result.exit_code, result.output.splitlines()


def _line(lines: list[str], pattern: str) -> str:
    found = [line for line in lines if re.search(pattern, line)]
    assert len(found) == 1, f"{pattern!r} in {lines}"
    return found[0]


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory) -> Iterator[TlsCoordinator]:
    coordinator = TlsCoordinator(tmp_path_factory.mktemp("doctor"))
    try:
        coordinator.wait_healthy()
        yield coordinator
    finally:
        coordinator.stop()


def test_a_healthy_federation_passes_every_check(coordinator, tmp_path):
    peer = socket.create_server(("127.0.0.1", 0))
    try:
        code, lines = _doctor(
            "--coordinator", coordinator.superlink,
            "--service", f"127.0.0.1:{coordinator.service}",
            "--ca", str(coordinator.tls.ca),
            "--data", str(write_client_data(tmp_path / "data.npz")),
            "--peer", f"127.0.0.1:{peer.getsockname()[1]}",
            "--state-dir", str(tmp_path / "state"),
        )  # fmt: skip
    finally:
        peer.close()
    assert code == 0, lines
    assert len(lines) == 10
    assert all(line[0] in "✓!" for line in lines), lines
    gateway, service = coordinator.superlink, f"127.0.0.1:{coordinator.service}"
    assert _line(lines, "Fleet gateway .* reachable").startswith(f"✓ Fleet gateway {gateway}")
    assert _line(lines, "coordinator service .* reachable").startswith("✓")
    for what, address in (("Fleet gateway", gateway), ("coordinator service", service)):
        valid = _line(lines, f"{what} {address}: certificate valid")
        assert valid == f"✓ {what} {address}: certificate valid for 127.0.0.1, signed by " + str(
            coordinator.tls.ca
        )
        # The test certificates live 7 days: under the 14 days that call for renewal.
        expiry = _line(lines, f"{what} {address}: certificate expires")
        assert expiry.startswith("! ") and "renews the coordinator's certificate" in expiry
    clock = _line(lines, "clock:")
    offset = float(re.search(r"clock: this machine is ([0-9.]+) s", clock)[1])
    assert clock.startswith("✓") and offset < 2.0
    assert _line(lines, "peer .* reachable").startswith("✓")
    assert _line(lines, "data file").startswith("✓") and "8 train, 8 val, 8 test" in lines[-2]
    assert _line(lines, "state dir").startswith("✓")


def test_a_closed_port_and_a_name_the_certificate_lacks_fail_with_the_fix(tmp_path, closed_port):
    tls = credentials(tmp_path / "tls", "coord.example.org")
    stub = TlsStub(tls.coordinator.cert, tls.coordinator.key)
    try:
        code, lines = _doctor(
            "--coordinator", f"127.0.0.1:{stub.port}", "--service", f"127.0.0.1:{closed_port}",
            "--ca", str(tls.ca),
        )  # fmt: skip
    finally:
        stub.close()
    assert code == 1
    name = _line(lines, "certificate names")
    assert name == (
        f"✗ Fleet gateway 127.0.0.1:{stub.port}: the certificate names coord.example.org, you "
        f"dialled 127.0.0.1 — fix: use one of those names (e.g. coord.example.org:{stub.port})"
    )
    refused = _line(lines, f"coordinator service 127.0.0.1:{closed_port} not reachable")
    assert refused.startswith("✗") and "connection refused" in refused
    assert f"— fix: check the address; on the coordinator, check that the daemon runs and " \
        f"that port {closed_port} is open" in refused  # fmt: skip
    assert _line(lines, "Fleet gateway .* reachable").startswith("✓")
    # One cause, one line: no certificate or expiry line for the port nobody answers on.
    assert not [line for line in lines if f"127.0.0.1:{closed_port}:" in line]


def test_another_ca_and_a_clock_a_minute_behind_fail(tmp_path):
    tls = credentials(tmp_path / "tls", "127.0.0.1")
    stub = TlsStub(tls.coordinator.cert, tls.coordinator.key, clock_offset_s=-60.0)
    other_ca = TestCA().write_ca(tmp_path)
    try:
        code, lines = _doctor("--coordinator", f"127.0.0.1:{stub.port}", "--ca", str(other_ca))
    finally:
        stub.close()
    assert code == 1
    untrusted = _line(lines, "certificate not trusted")
    assert untrusted.startswith("✗") and f"{other_ca} did not sign the certificate" in untrusted
    clock = _line(lines, "clock:")
    assert re.match(r"✗ clock: this machine is (59|60)\.\d s \(±[0-9.]+ s\) ahead of the", clock)
    assert "signed more than 5 s ahead" in clock and "timedatectl set-ntp true" in clock


def test_a_malformed_data_file_fails_with_what_is_wrong(tmp_path):
    bad = spoil(write_client_data(tmp_path / "data.npz"), y_val=np.full(8, 99))
    code, lines = _doctor("--data", str(bad))
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith(f"✗ data file: {bad}")
    assert "— fix: give --data an .npz" in lines[0]


def test_malformed_input_is_refused_before_any_check():
    code, lines = _doctor("--coordinator", "coord.example.org")
    assert code == 2
    assert "--coordinator: 'coord.example.org' is not HOST:PORT" in " ".join(lines)


def test_a_client_state_dir_supplies_the_saved_settings(coordinator, tmp_path):
    """`doctor --state-dir` of an enrolled client checks what that client uses: the
    coordinator it dials, the CA, its data, its own certificate and its device."""
    from collabfl.client.settings import ParticipantSettings, parser
    from collabfl.kernel.daemon_settings import save

    cert, key = TestCA().member(0).write(tmp_path, "member")
    data = write_client_data(tmp_path / "data.npz")
    state = tmp_path / "state"
    args = parser().parse_args([
        "--client-id", "0", "--data", str(data), "--state-dir", str(state),
        "--superlink", coordinator.superlink, "--peer-address", "127.0.0.1:9200",
        "--coordinator-key", str(cert), "--root-certificates", str(coordinator.tls.ca),
        "--peer-cert", str(cert), "--peer-key", str(key), "--device", "cpu",
    ])  # fmt: skip
    save(ParticipantSettings.from_flags(args))
    code, lines = _doctor("--state-dir", str(state))
    assert code == 0, lines
    assert _line(lines, "Fleet gateway .* reachable").startswith("✓")
    assert _line(lines, "Fleet gateway .* certificate valid").startswith("✓")
    assert _line(lines, "data file").startswith("✓")
    assert _line(lines, "this member's certificate").startswith("!")  # a 2-day test cert
    assert _line(lines, "device cpu").startswith("✓")
    code, lines = _doctor("--state-dir", str(state), "--device", "cuda:7")
    assert code == 1
    device = _line(lines, "device")
    assert device.startswith("✗") and "cuda:7" in device and "fix:" in device


def test_a_coordinator_state_dir_checks_its_public_port_and_service(coordinator):
    """`doctor --state-dir` on the coordinator's own folder (it once failed with the client
    daemon's "unrecognized arguments"): its saved flags name the gateway, the service and
    the CA, and each is checked as a participant reaches it."""
    code, lines = _doctor("--state-dir", str(coordinator.state_dir))
    assert code == 0, lines
    gateway, service = coordinator.superlink, f"127.0.0.1:{coordinator.service}"
    assert _line(lines, f"Fleet gateway {gateway} reachable").startswith("✓")
    assert _line(lines, f"coordinator service {service} reachable").startswith("✓")
    assert _line(lines, f"Fleet gateway {gateway}: certificate valid").startswith("✓")
    assert not [line for line in lines if "unrecognized" in line]


def test_bare_doctor_checks_this_machine(tmp_path, monkeypatch):
    """Given nothing it used to check nothing (exit 2); now it checks the software, CUDA,
    the run folder and the state folder named in the environment (issue #42, 7)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["doctor"], env={STATE_ENV: str(tmp_path / "state")})
    lines = result.output.splitlines()
    assert result.exit_code == 0, lines
    for pattern in (r"^✓ Python 3\.", r"^✓ torch ", r"^✓ flwr 1\.4[12]\.", r"^✓ grpcio ",
                    r"^✓ protobuf ", r"^[✓!] CUDA", r"^✓ run folder .*runs writable",
                    r"^✓ state dir .*state writable"):  # fmt: skip
        _line(lines, pattern)


def test_a_package_outside_collabfls_bounds_fails_with_the_fix():
    flwr = Requirement("flwr>=1.41,<1.43")
    assert package_version("flwr", "1.42.0", flwr).ok
    old = package_version("flwr", "1.40.2", flwr)
    assert not old.ok and old.render() == (
        "✗ flwr 1.40.2, but collabfl needs <1.43,>=1.41 — fix: pip install 'flwr<1.43,>=1.41' "
        "(requirements.txt pins what the tests ran on)"
    )
    assert not package_version("flwr", None, flwr).ok


def test_state_dirs_from_the_environment_else_the_defaults_that_exist(tmp_path):
    kept = tmp_path / "collabfl"
    kept.mkdir()
    defaults = (kept, tmp_path / "collabfl-client")
    assert state_dirs({}, defaults) == [kept]
    assert state_dirs({STATE_ENV: "/srv/mine"}, defaults) == [Path("/srv/mine")]
