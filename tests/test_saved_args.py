"""Daemons keep their flags in the state directory: a restart takes ``--state-dir`` alone."""

from __future__ import annotations

import os

import pytest

from collabfl.client import daemon as client_daemon
from collabfl.coordinator import daemon as coordinator_daemon
from collabfl.kernel.saved_args import FILE_NAME, save, with_saved


def test_a_restart_with_the_state_dir_alone_gets_the_saved_flags(tmp_path, monkeypatch):
    parser = client_daemon.parser()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.npz").touch()
    first = ["--client-id", "3", "--data", "data.npz", "--state-dir", "state",
             "--superlink", "coord:9093", "--peer-address", "lab:9200",
             "--coordinator-key", "key.pem", "--allow-import", "a.b:c",
             "--allow-import", "d.e:f", "--insecure"]  # fmt: skip
    args = parser.parse_args(with_saved(first))
    save(parser, args, tmp_path / "state")
    assert oct((tmp_path / "state" / FILE_NAME).stat().st_mode & 0o777) == "0o600"
    os.chdir("/")  # the next start may come from anywhere
    again = parser.parse_args(with_saved(["--state-dir", str(tmp_path / "state")]))
    assert again.client_id == 3 and again.insecure
    assert again.data == tmp_path / "data.npz"  # made absolute when saved
    assert again.allow_import == ["a.b:c", "d.e:f"]
    assert again.superlink == "coord:9093"


def test_flags_given_again_replace_the_saved_set(tmp_path):
    parser = coordinator_daemon.parser()
    state = tmp_path / "state"
    save(parser, parser.parse_args(["--state-dir", str(state), "--name", "a.example"]), state)
    replaced = parser.parse_args(with_saved(["--state-dir", str(state), "--name", "b.example"]))
    assert replaced.name == ["b.example"]
    kept = parser.parse_args(with_saved(["--state-dir", str(state), "--log-level", "DEBUG"]))
    assert kept.name == ["a.example"] and kept.log_level == "DEBUG"


def test_a_client_without_settings_says_how_to_enrol(tmp_path, capsys):
    code = client_daemon.main(["--state-dir", str(tmp_path / "empty")])
    assert code == 2
    said = capsys.readouterr().err
    assert "collabfl-client join" in said and "--client-id" in said


def test_a_damaged_settings_file_is_named(tmp_path, capsys):
    (tmp_path / FILE_NAME).write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match=FILE_NAME):
        with_saved(["--state-dir", str(tmp_path)])
    assert client_daemon.main(["--state-dir", str(tmp_path)]) == 2
    assert FILE_NAME in capsys.readouterr().err
