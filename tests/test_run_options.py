"""Run options: one dataclass, two spellings (Flower run config, stored run request)."""

from __future__ import annotations

import tomllib

from collabfl.coordinator.daemon import write_app
from collabfl.coordinator.launch import Launch
from collabfl.engine.config import ExperimentConfig
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.run_options import RunOptions

OPTIONS = RunOptions(
    expected_clients=3, join_timeout_s=5.0, message_timeout_s=7.5, grant_ttl_s=9.0, out_dir="/r"
)


def test_flower_run_config_round_trip():
    assert OPTIONS.to_run_config() == {
        "expected-clients": 3,
        "join-timeout": 5.0,
        "message-timeout": 7.5,
        "grant-ttl": 9.0,
        "out-dir": "/r",
    }
    assert RunOptions.from_run_config(OPTIONS.to_run_config()) == OPTIONS
    assert RunOptions.from_run_config({"run-id": "x", "message-timeout": 30}) == RunOptions(
        message_timeout_s=30.0
    )


def test_stored_request_round_trip():
    request = run_request(parse_method_spec("local", ExperimentConfig()), OPTIONS)
    assert request["experiment"]["method"] == "local"
    assert request["expected_clients"] == 3 and request["message_timeout"] == 7.5
    assert request["out_dir"] == "/r"
    assert RunOptions.from_request(request) == OPTIONS
    stored_before_join_and_grant_keys = {"expected_clients": 2, "message_timeout": 600.0}
    assert RunOptions.from_request(stored_before_join_and_grant_keys) == RunOptions(2)


def test_the_flower_app_declares_the_defaults(tmp_path):
    pyproject = tomllib.loads((write_app(tmp_path) / "pyproject.toml").read_text())
    declared = pyproject["tool"]["flwr"]["app"]["config"]
    assert declared == {**Launch().to_run_config(), **RunOptions().to_run_config()}
    assert {
        "run-id",
        "coordinator",
        "launch-token-file",
        "coordinator-ca",
        "run-ticket",
        "node-bindings",
    } <= set(declared)
    assert RunOptions.from_run_config(declared) == RunOptions()
