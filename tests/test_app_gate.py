"""The participant's gate (flower/app_gate.py): only ticketed runs of collabfl's own app.

FABs are built by Flower's own builder from app folders on disk: the coordinator's
(coordinator/daemon.py ``write_app``) and a foreign one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk

from collabfl.apps import client_app
from collabfl.coordinator.superlink.run_launcher import write_app
from collabfl.flower.app_gate import (
    COLLABFL_APP,
    RefusedTask,
    check_task,
    declared_app,
    installed_client_app,
)
from collabfl.kernel.grants import GrantSigner, generate_private_key, save_public_key
from collabfl.kernel.tickets import TicketSigner
from tests.support.foreign_app import write_foreign_app

KEY = generate_private_key()


@pytest.fixture
def node_config(tmp_path: Path) -> dict[str, str]:
    key_file = tmp_path / "coordinator.pub.pem"
    save_public_key(GrantSigner(KEY).public_key_bytes(), key_file)
    return {"coordinator-key": str(key_file)}


def _ticketed(run: str = "r1") -> dict[str, str]:
    # Built at collection (parametrize): valid long enough to outlive a slow suite.
    return {"run-id": run, "run-ticket": TicketSigner(KEY).issue(run, ttl_s=24 * 3600)}


def test_the_coordinators_app_is_what_the_gate_lets_through(tmp_path, node_config):
    fab = build_fab_from_disk(write_app(tmp_path / "coordinator"))
    assert declared_app(fab) == COLLABFL_APP
    check_task(node_config, _ticketed(), fab, flower_run=1)
    assert installed_client_app() is client_app.app


def test_a_foreign_app_is_refused_even_with_a_genuine_ticket(tmp_path, node_config, caplog):
    fab = build_fab_from_disk(write_foreign_app(tmp_path / "foreign", tmp_path / "marker"))
    with pytest.raises(RefusedTask, match=r"not collabfl's app: it declares .*'publisher'"):
        check_task(node_config, _ticketed(), fab, flower_run=9)
    assert "REFUSED a task of Flower run 9" in caplog.text
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize(
    ("run_config", "reason"),
    [
        ({}, "the run carries no ticket"),
        ({"run-id": "r1", "run-ticket": "forged"}, "malformed"),
        ({"run-id": "r2", "run-ticket": _ticketed("r1")["run-ticket"]}, "not 'r2'"),
    ],
)
def test_the_coordinators_app_without_a_valid_ticket_is_refused(
    tmp_path, node_config, run_config, reason
):
    fab = build_fab_from_disk(write_app(tmp_path / "coordinator"))
    with pytest.raises(RefusedTask, match=reason):
        check_task(node_config, run_config, fab, flower_run=2)


@pytest.mark.parametrize("fab", [b"", b"not a zip", b"PK\x05\x06" + bytes(18)])
def test_a_fab_that_declares_nothing_is_refused(node_config, fab):
    with pytest.raises(RefusedTask, match="declares no readable app"):
        check_task(node_config, _ticketed(), fab, flower_run=3)
