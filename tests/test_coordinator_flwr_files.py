"""What the coordinator writes and hands Flower names paths in its state and runs dirs, and
any path passes, a backslash, a double quote or a space included: the ``flwr`` connection to
its SuperLink (FLWR_HOME/config.toml, the SuperLink's CA: an operator's ``flwr ls`` and the
admin commands read it), once written by hand into TOML (a ``\\`` was an escape, a ``"``
ended the string), and each launch's run config (its token and sizes files, its out dir),
once ``key=value`` pairs cut out by Flower's pattern (a ``"`` could not pass), now typed
values in the StartRun request. Flower's own reader reads the connection here, as ``flwr``
does: on a Flower upgrade that reads it differently, these contract tests fail."""

from __future__ import annotations

from pathlib import Path

from flwr.cli.flower_config import read_superlink_connection
from support.coordinator import valid_request

from collabfl.coordinator.settings import CoordinatorSettings
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.coordinator.superlink.local_superlink import (
    CONNECTION,
    local_superlink_control,
    loopback_tls,
    write_flower_home,
)
from tests.test_coordinator_daemon import FakeFlower, _launcher

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


def test_a_launchs_run_config_names_any_folder(tmp_path, monkeypatch):
    flower = FakeFlower()
    state_dir = tmp_path / AWKWARD
    state_dir.mkdir()
    with CoordinatorState(state_dir / "coordinator.db") as state:
        launcher = _launcher(state, state_dir, flower)
        state.create_run("r", "dpfl", valid_request(out_dir='out "1" \\ x'))
        launcher.check_runs()
        [config] = flower.submitted
        launcher.stop()
    assert config["out-dir"] == str((state_dir / "runs" / 'out "1" \\ x').resolve())
    token_file = Path(config["launch-token-file"])
    assert token_file.parent.parent == state_dir.resolve() and token_file.is_file()
    assert Path(config["enrolled-sizes-file"]).is_file()
    assert config["run-id"] == "r"
