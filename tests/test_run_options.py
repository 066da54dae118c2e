"""Run options: one strict pydantic model, two spellings (Flower run config, stored run request)."""

from __future__ import annotations

import re
import tomllib

import pytest
from pydantic import ValidationError

from collabfl.coordinator.superlink.launch import Launch
from collabfl.coordinator.superlink.run_launcher import write_app
from collabfl.engine.config import ExperimentConfig
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.run_options import InvalidRunOptions, RunOptions

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
    assert RunOptions.from_request(stored_before_join_and_grant_keys) == RunOptions(
        expected_clients=2
    )


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


@pytest.mark.parametrize(
    ("request_entries", "message"),
    [
        ({"expected_clients": "three"}, "expected_clients must be int, got 'three'"),
        ({"expected_clients": True}, "expected_clients must be int, got True"),
        ({"expected_clients": 2.0}, "expected_clients must be int, got 2.0"),
        ({"expected_clients": 0}, "expected_clients must be >= 1, got 0"),
        ({"join_timeout": "5"}, "join_timeout must be float, got '5'"),
        ({"join_timeout": -1}, "join_timeout_s must be a positive number of seconds, got -1"),
        ({"grant_ttl": float("inf")}, "grant_ttl_s must be a positive number of seconds"),
        ({"out_dir": 3}, "out_dir must be str, got 3"),
    ],
)
def test_a_mistyped_or_out_of_range_option_is_refused_by_name(request_entries, message):
    with pytest.raises(InvalidRunOptions, match="^" + re.escape(message)):
        RunOptions.from_request(request_entries)


def test_a_run_config_option_is_named_as_flower_spells_it():
    refused = re.escape("message-timeout must be float, got 'x'")
    with pytest.raises(InvalidRunOptions, match=refused):
        RunOptions.from_run_config({"message-timeout": "x"})


def test_options_are_strict_frozen_and_closed():
    assert RunOptions.from_request({"message_timeout": 30}).message_timeout_s == 30.0
    with pytest.raises(ValidationError, match="expected_clients"):
        RunOptions(expected_clients=0)
    with pytest.raises(ValidationError, match="extra_forbidden"):
        RunOptions(clients=2)
    with pytest.raises(ValidationError, match="frozen"):
        OPTIONS.out_dir = "/elsewhere"
