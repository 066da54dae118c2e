"""``collabfl admin ... --json`` prints one JSON document a script can parse, and ``admin
status --state-dir`` adds what only the coordinator's machine knows (the Flower run ids),
against a real coordinator service on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collabfl.cli.admin import admin_app
from collabfl.coordinator.service import serve
from collabfl.coordinator.settings import CoordinatorSettings
from collabfl.coordinator.store.state import CoordinatorState, Member
from collabfl.coordinator.superlink.launch import flower_run_file
from collabfl.coordinator.superlink.local_superlink import write_flower_home

METRICS = {0: {"test_acc": 0.5, "utility": 1.0, "gain": 2.0}, 1: {"test_acc": 0.75}}
LEDGER = {"gain": 2.0, "sharing_cost": 0.5, "payment": 1.0, "utility": 0.5, "importers": 1}


class NoGrants:
    def issue(self, run: str, fetcher: int, owner: int, round: int, ttl_s: float) -> bytes:
        raise AssertionError("no grants in these tests")


@pytest.fixture
def address(tmp_path: Path) -> Iterator[str]:
    """A live coordinator service with two members, an active run with a round, an event."""
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        state.register_members([Member(c, 700 + c, f"10.0.0.{c}:9200", 40) for c in range(2)])
        state.create_run("exp", "ipfl", {"out_dir": str(tmp_path / "exp")})
        state.record_round("exp", 0, [(0, 1, 0.5)], {0: LEDGER, 1: METRICS[1]}, num_clients=2)
        state.record_event("exp", "peer_skipped", "digest mismatch", round=0, client_id=1)
        state.create_run("queued", "dpfl", {})
        server, port = serve(state, NoGrants())
        try:
            yield f"127.0.0.1:{port}"
        finally:
            server.stop(None)


def _json(address: str, *args: str) -> object:
    result = CliRunner().invoke(admin_app, ["--coordinator", address, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_read_commands_print_parseable_json(address: str) -> None:
    status = _json(address, "status")
    assert status["coordinator"] == address
    assert (status["num_members"], status["num_runs"]) == (2, 2)
    assert {run["run_id"] for run in status["active_runs"]} == {"exp", "queued"}
    assert "flower_runs" not in status  # only with --state-dir, on the coordinator's machine

    members = _json(address, "members")
    assert [(m["client_id"], m["flower_node_id"]) for m in members] == [(0, 700), (1, 701)]
    assert [run["run_id"] for run in _json(address, "runs")] == ["exp", "queued"]

    [event] = _json(address, "events", "exp")
    assert (event["kind"], event["round"], event["client_id"]) == ("peer_skipped", 0, 1)

    metrics = _json(address, "metrics", "exp")
    assert metrics["rounds"]["0"]["1"]["test_acc"] == 0.75

    graph = _json(address, "graph", "exp", "0")
    assert (graph["num_clients"], graph["edges"]) == (2, [[0, 1, 0.5]])
    assert graph["mean_out_degree"] == 0.5

    payments = _json(address, "payments", "exp")
    assert payments["round"] == 0
    assert payments["rounds"]["0"]["0"]["payment"] == 1.0


def test_status_names_each_runs_flower_run(address, tmp_path, closed_port) -> None:
    """The Flower run id comes from the launcher's reply it keeps in the state directory."""
    state_dir = tmp_path / "coordinator"
    (state_dir / "runs").mkdir(parents=True)
    settings = CoordinatorSettings(
        state_dir=state_dir, superlink_internal_port=closed_port, insecure=True
    )
    write_flower_home(settings)
    reply = {"success": True, "run-id": "4242", "fab-id": "collabfl/collabfl-federation"}
    flower_run_file(state_dir, "exp").parent.mkdir()
    flower_run_file(state_dir, "exp").write_text(json.dumps(reply))

    status = _json(address, "status", "--state-dir", str(state_dir))
    assert status["flower_runs"] == {"exp": 4242, "queued": None}

    command = ["--coordinator", address, "status", "--state-dir", str(state_dir)]
    result = CliRunner().invoke(admin_app, command)
    assert result.exit_code == 0, result.output
    assert "4242" in result.stdout
