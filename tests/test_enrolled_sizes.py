"""Sizes declared at enrolment: ``collabfl admin invite --samples N`` vouches for a member's
training samples, its enrolment keeps them, every launch hands them to the ServerApp in a
0600 file (never in the run config every member sees), and the ServerApp holds the member's
report to them as it does ``federation.declared_sizes``, which wins when both declare.

Through the real admin CLI, coordinator service, public join endpoint (a real gateway) and
run launcher; the ServerApp's admission as tests/test_reported_sizes.py drives it.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from support.coordinator import FakeSigner, valid_request
from typer.testing import CliRunner

from collabfl.cli.admin import admin_app
from collabfl.coordinator.service import serve
from collabfl.coordinator.superlink.launch import Launch
from collabfl.flower.reported_sizes import DeclaredSizes, declared_sizes
from collabfl.kernel.identity import Role
from collabfl.kernel.join_client import join
from tests.test_coordinator_daemon import FakeFlower, _launcher
from tests.test_enrolment import SUPERNODE_KEY, _key, coordinator  # noqa: F401
from tests.test_node_binding import flower_task  # noqa: F401  (autouse fixture)
from tests.test_reported_sizes import _admit


@pytest.fixture
def admin(coordinator):  # noqa: F811
    """``collabfl admin ...`` against a coordinator service that enrols through it."""
    server, port = serve(coordinator.state, FakeSigner(), enroller=coordinator.enroller)

    def run(*args: str):
        return CliRunner(env={"COLUMNS": "250"}).invoke(
            admin_app, ["--coordinator", f"127.0.0.1:{port}", *args]
        )

    yield run
    server.stop(None)


def test_admin_invite_declares_samples_that_the_enrolment_keeps(coordinator, admin):  # noqa: F811
    invited = admin("invite", "--client-id", "0", "--host", "127.0.0.1", "--samples", "1200",
                    "--json")  # fmt: skip
    assert invited.exit_code == 0, invited.output
    join(coordinator.address, json.loads(invited.output)["token"], _key(), SUPERNODE_KEY)
    plain = admin("invite", "--client-id", "1", "--host", "127.0.0.1", "--json")
    join(coordinator.address, json.loads(plain.output)["token"], _key(), SUPERNODE_KEY)
    assert coordinator.enroller.store.declared_samples() == {0: 1200}
    listed = {e["subject"]: e["samples"] for e in json.loads(admin("enrolments", "--json").output)}
    assert listed == {"0": 1200, "1": None}
    coordinator.enroller.revoke(Role.MEMBER, "0")
    assert coordinator.enroller.store.declared_samples() == {}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--operator", "ana", "--samples", "10"], "use it with --client-id"),
        (["--client-id", "0", "--host", "h", "--samples", "0"], "--samples"),
    ],
)
def test_samples_are_refused_where_they_mean_nothing(admin, args, said):
    result = admin("invite", *args)
    assert result.exit_code != 0 and said in result.output


def test_each_launch_hands_the_serverapp_the_enrolled_sizes_in_a_private_file(
    tmp_path,
    monkeypatch,
    coordinator,  # noqa: F811
):
    flower = FakeFlower()
    state = coordinator.state
    launcher = _launcher(state, tmp_path, flower, enrolled_sizes=lambda: {0: 1200, 2: 80})
    state.create_run("r", "fedavg", valid_request("fedavg"))
    launcher.check_runs()
    [settings] = flower.submitted
    assert "1200" not in str(settings)  # only the file's path travels to every member
    path = Path(settings["enrolled-sizes-file"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Launch.from_run_config(settings).enrolled_sizes() == {0: 1200, 2: 80}
    launcher.stop()


def test_the_run_config_wins_over_the_enrolment_and_says_so():
    sizes, conflicts = declared_sizes({0: 400, 1: 300, 2: 90}, {1: 500, 2: 90, 3: 70})
    assert sizes == {0: 400, 1: 500, 2: 90, 3: 70}
    assert conflicts == {
        1: "the run config declares 500 training samples, its enrolment 300: this run uses 500"
    }


def test_a_report_outside_the_enrolled_size_is_replaced(monkeypatch):
    sizes, _ = declared_sizes({0: 400}, {})
    counts, anomalies = _admit(monkeypatch, {0: 40_000, 1: 380}, DeclaredSizes(sizes, 0.1))
    assert counts == {0: 400, 1: 380}
    [(client, message)] = anomalies
    assert client == 0 and "reported 40000 training samples, declared 400" in message


def test_a_start_with_undeclared_sizes_names_them_or_is_refused(coordinator, admin):  # noqa: F811
    """Client 0 declared its size at enrolment, client 1 did not: a size-weighted run
    says so at start and records an event; with federation.require_declared_sizes it is
    refused and nothing is created; a method that weighs no size says nothing."""
    for client, extra in (("0", ["--samples", "1200"]), ("1", [])):
        invited = admin("invite", "--client-id", client, "--host", "127.0.0.1", *extra, "--json")
        join(coordinator.address, json.loads(invited.output)["token"], _key(), SUPERNODE_KEY)
    refused = admin("start", "--clients", "2", "--method", "fedavg", "--run-id", "strict",
                    "--set", "federation.require_declared_sizes=true")  # fmt: skip
    assert refused.exit_code != 0
    assert (
        "federation.require_declared_sizes" in refused.output and "client(s) 1:" in refused.output
    )
    assert [r.run_id for r in coordinator.state.runs()] == []
    started = admin("start", "--clients", "2", "--method", "fedavg", "--run-id", "lenient")
    assert started.exit_code == 0, started.output
    assert "warning: no declared training-sample count for client(s) 1:" in started.output
    [event] = [e for e in coordinator.state.events("lenient") if e.kind == "undeclared_sizes"]
    assert "client(s) 1:" in event.message
    coordinator.state.finish_run("lenient", "stopped")
    alone = admin("start", "--clients", "2", "--method", "local", "--run-id", "alone")
    assert alone.exit_code == 0 and "undeclared" not in alone.output + "".join(
        e.kind for e in coordinator.state.events("alone")
    )
