"""The ``flwr`` connection the coordinator writes for its own ``flwr run``/``stop``/``log``
(FLWR_HOME/config.toml) names its SuperLink's CA by path: any state dir passes, a backslash,
a double quote or a space included (written by hand into TOML, a ``\\`` was an escape and a
``"`` ended the string). Flower's own reader of the file reads it here, as ``flwr`` does: on
a Flower upgrade that reads it differently, this contract test fails."""

from __future__ import annotations

from pathlib import Path

from flwr.cli.flower_config import read_superlink_connection

from collabfl.coordinator.settings import CoordinatorSettings
from collabfl.coordinator.superlink import (
    CONNECTION,
    local_superlink_control,
    loopback_tls,
    write_flower_home,
)

AWKWARD = 'lab \\backup "new"'


def test_contract_flwr_reads_the_connection_of_any_state_dir(tmp_path, monkeypatch):
    state = tmp_path / AWKWARD
    settings = CoordinatorSettings(state_dir=state, superlink_internal_port=9123)
    monkeypatch.setenv("FLWR_HOME", str(write_flower_home(settings)))
    connection = read_superlink_connection(CONNECTION)
    assert connection.address == "127.0.0.1:9123"
    tls = loopback_tls(settings)
    assert tls is not None
    assert Path(str(connection.root_certificates)) == tls.ca.resolve()
    control = local_superlink_control(state)  # the coordinator's own reader of the file
    control.close()


def test_an_insecure_coordinators_connection_says_so(tmp_path, monkeypatch):
    settings = CoordinatorSettings(state_dir=tmp_path / AWKWARD, insecure=True)
    monkeypatch.setenv("FLWR_HOME", str(write_flower_home(settings)))
    connection = read_superlink_connection(CONNECTION)
    assert connection.insecure and connection.root_certificates is None
