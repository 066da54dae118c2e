"""Reading the Flower run id from ``flwr run --format json`` (samples captured from flwr 1.41)."""

import pytest

from collabfl.coordinator.superlink.flower_runs import FlowerCliError, submitted_run_id

STARTED = """{
  "success": true,
  "run-id": "9719863562065456825",
  "federation-id": "@none/default",
  "fab-id": "collabfl/collabfl-federation",
  "fab-name": "collabfl-federation",
  "fab-version": "1.0.0",
  "fab-hash": "21b983f7",
  "fab-filename": "collabfl.collabfl-federation.1-0-0.21b983f7.fab"
}
"""
"""``flwr run <app> collabfl --format json`` against a running SuperLink."""

NO_SUPERLINK = """{
  "success": false,
  "error-message": "Using SuperLink: collabfl (127.0.0.1:40591)\\n\\nConnection to the \
SuperLink is unavailable. Please check your network connection and 'address' in the \
SuperLink connection configuration."
}
"""
"""The same with no SuperLink listening: flwr still exits 0."""


def test_run_id_of_a_started_run() -> None:
    assert submitted_run_id(STARTED) == 9719863562065456825


def test_a_failed_submission_says_why() -> None:
    with pytest.raises(FlowerCliError) as raised:
        submitted_run_id(NO_SUPERLINK)
    assert str(raised.value) == (
        "flwr run failed: Using SuperLink: collabfl (127.0.0.1:40591) Connection to the "
        "SuperLink is unavailable. Please check your network connection and 'address' in the "
        "SuperLink connection configuration."
    )


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "printed no JSON object"),
        ("Successfully started run 12\n", "printed no JSON object"),
        ('["success", true]', "printed no JSON object"),
        ('{"success": true}', "reported success but no run id"),
        ('{"success": true, "run-id": "twelve"}', "reported success but no run id"),
        ('{"run-id": "12"}', "flwr run failed: no reason given"),
    ],
)
def test_anything_else_is_refused_with_a_reason(output: str, message: str) -> None:
    with pytest.raises(FlowerCliError, match=message):
        submitted_run_id(output)
