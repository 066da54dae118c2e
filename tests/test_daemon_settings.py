"""Daemons keep their settings in the state directory: a restart takes ``--state-dir`` alone.

The settings are one strict model per daemon, saved with ``model_dump_json`` and read back
with ``model_validate_json``; a state dir an older collabfl saved (its flags as a JSON list)
is still read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import get_args

import pytest

from collabfl.client import daemon as client_daemon
from collabfl.client.settings import ParticipantSettings
from collabfl.client.settings import parser as client_parser
from collabfl.coordinator.settings import CoordinatorSettings
from collabfl.coordinator.settings import parser as coordinator_parser
from collabfl.flower.processes import CLIENT_RUNTIMES, DEFAULT_RUNTIME
from collabfl.kernel.daemon_settings import FILE_NAME, LEGACY_FILE, load, save


def _client(argv: list[str]) -> ParticipantSettings:
    return load(ParticipantSettings, client_parser(), argv)


def _first_start(tmp_path: Path) -> list[str]:
    (tmp_path / "data.npz").touch()
    return ["--client-id", "3", "--data", "data.npz", "--state-dir", "state",
            "--superlink", "coord:9093", "--peer-address", "lab:9200",
            "--coordinator-key", "key.pem", "--allow-import", "a.b:c",
            "--allow-import", "d.e:f", "--insecure", "--keep-rounds", "5"]  # fmt: skip


def test_a_restart_with_the_state_dir_alone_gets_the_saved_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = _client(_first_start(tmp_path))
    save(first)
    assert oct((tmp_path / "state" / FILE_NAME).stat().st_mode & 0o777) == "0o600"
    os.chdir("/")  # the next start may come from anywhere
    again = _client(["--state-dir", str(tmp_path / "state")])
    assert again.client_id == 3 and again.insecure and again.keep_rounds == 5
    assert again.data == tmp_path / "data.npz"  # made absolute when saved, a file again
    assert again.coordinator_key == tmp_path / "key.pem"
    assert again.allow_import == ("a.b:c", "d.e:f")
    assert again.superlink == "coord:9093"
    assert again.state_dir == tmp_path / "state"
    stored = json.loads((tmp_path / "state" / FILE_NAME).read_text())
    assert "log_level" not in stored and "runtime_port" not in stored  # defaults left out


def test_the_saved_settings_are_the_models_json(tmp_path):
    state = tmp_path / "state"
    argv = ["--client-id", "0", "--data", "mylab.data:clients", "--allow-import",
            "mylab.data:clients", "--state-dir", str(state), "--superlink", "c:9093",
            "--peer-address", "lab:9200", "--coordinator-key", str(tmp_path / "k.pem"),
            "--cost", "0.5"]  # fmt: skip
    settings = _client(argv)
    save(settings)
    read = ParticipantSettings.model_validate_json((state / FILE_NAME).read_text())
    assert read == settings
    assert read.data == "mylab.data:clients"  # a factory's import path stays text


def test_the_log_level_given_at_a_restart_is_used_and_never_saved(tmp_path):
    state = tmp_path / "state"
    save(load(CoordinatorSettings, coordinator_parser(), ["--state-dir", str(state),
                                                          "--log-level", "DEBUG"]))  # fmt: skip
    again = load(CoordinatorSettings, coordinator_parser(), ["--state-dir", str(state)])
    assert again.log_level == "INFO"
    quiet = ["--state-dir", str(state), "--log-level", "WARNING"]
    assert load(CoordinatorSettings, coordinator_parser(), quiet).log_level == "WARNING"


def test_flags_given_again_replace_the_saved_set(tmp_path):
    parser = coordinator_parser()
    state = tmp_path / "state"
    save(load(CoordinatorSettings, parser, ["--state-dir", str(state), "--name", "a.example",
                                            "--service-port", "9400"]))  # fmt: skip
    replaced = load(CoordinatorSettings, parser, ["--state-dir", str(state), "--name", "b"])
    assert replaced.name == ("b",) and replaced.service_port == 9300
    kept = load(CoordinatorSettings, parser, ["--state-dir", str(state), "--log-level", "DEBUG"])
    assert kept.name == ("a.example",) and kept.log_level == "DEBUG"
    assert kept.service_port == 9400


def test_a_state_dir_saved_by_an_older_collabfl_is_read_then_replaced(tmp_path):
    """The flags file of the previous format (a JSON list, paths absolute, defaults left
    out), as `collabfl-client join` and the daemons wrote it: read with the daemon's parser;
    the next save writes the settings file in its place."""
    state = tmp_path / "state"
    state.mkdir()
    data = tmp_path / "lab \\data" / 'client "0".npz'
    data.parent.mkdir()
    data.touch()
    old = ["--client-id", "7", "--data", str(data), "--superlink", "coord:9093",
           "--peer-address", "lab:9200", "--coordinator-key", str(tmp_path / "key.pem"),
           "--allow-import", "a.b:c", "--insecure", "--max-restarts", "4"]  # fmt: skip
    (state / LEGACY_FILE).write_text(json.dumps(old, indent=1))
    settings = _client(["--state-dir", str(state)])
    assert (settings.client_id, settings.data, settings.insecure) == (7, data, True)
    assert (settings.allow_import, settings.max_restarts) == (("a.b:c",), 4)
    save(settings)
    assert not (state / LEGACY_FILE).exists()
    assert _client(["--state-dir", str(state)]) == settings


@pytest.mark.parametrize(
    ("model", "make_parser"),
    [(ParticipantSettings, client_parser), (CoordinatorSettings, coordinator_parser)],
)
def test_the_model_has_one_field_per_flag(model, make_parser):
    flags = vars(make_parser().parse_args(["--state-dir", "s"]))  # every flag, given or not
    assert set(flags) == set(model.model_fields)


def test_the_client_runtimes_are_the_ones_flower_processes_runs():
    runtime = ParticipantSettings.model_fields["runtime"]
    assert get_args(runtime.annotation) == CLIENT_RUNTIMES
    assert runtime.default == DEFAULT_RUNTIME


def test_a_client_without_settings_says_how_to_enrol(tmp_path, capsys):
    code = client_daemon.main(["--state-dir", str(tmp_path / "empty")])
    assert code == 2
    said = capsys.readouterr().err
    assert "collabfl-client join" in said and "--client-id" in said


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        (LEGACY_FILE, '{"not": "a list"}', "is not a list of flags"),
        (FILE_NAME, '["--client-id", "3"]', ": input should be an object, got"),
        (FILE_NAME, '{"state_dir": "/s", "colour": "red"}', "--colour: extra inputs are not"),
        (FILE_NAME, '{"state_dir": "/s", "client_id": "three"}', "--client-id: input should"),
    ],
)
def test_a_damaged_settings_file_is_named_in_one_line(tmp_path, capsys, name, text, said):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=name):
        _client(["--state-dir", str(tmp_path)])
    assert client_daemon.main(["--state-dir", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(tmp_path / name) in line and said in line and "every flag" in line


def test_a_value_out_of_its_range_is_refused_in_one_line_before_anything_runs(tmp_path, capsys):
    from collabfl.coordinator import daemon as coordinator_daemon

    base = ["--state-dir", str(tmp_path / "state"), "--insecure"]
    assert coordinator_daemon.main([*base, "--superlink-port", "70000"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "collabfl-coordinator: --superlink-port: input should be less than or equal to 65535, "
        "got 70000"
    )
    assert coordinator_daemon.main([*base, "--run-ticket-ttl", "inf"]) == 2
    assert "--run-ticket-ttl: input should be a finite number" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()
