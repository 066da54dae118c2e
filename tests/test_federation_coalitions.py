"""FedCollab and collaboration equilibrium over the real federation (SuperLink, SuperNodes,
peer gRPC servers, SQLite), compared with the in-process runtime on the same seed and config.

The distance estimation's discriminators and SPO's target models and gradients travel through
the coordinator's sub-step relay (one Flower seat message per client, apps/substeps.py),
and the greedy OCS search fetches peers' warm-up models over gRPC; every
method must reach the same coalitions and the same per-client results as in-process, and the
coordinator must have stored the coalitions.

The federation runs with mutual TLS (``federation up --tls``): each ClientApp dials the
relay with its member certificate, the ServerApp with the coordinator's. The relay without
TLS is tested over real gRPC in tests/test_substep_relay.py, and a federation without TLS in
tests/test_federation_e2e.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.engine.recording import safe_name
from collabfl.engine.report.run_dir import MESSAGES_FILE, read_run
from tests.support.cli_runs import IN_THIS_PROCESS

pytestmark = pytest.mark.federation

METHODS = ["fedcollab", "equilibrium", "equilibrium:ocs=spo"]
SETTINGS = [
    "data.num_train=1500",
    "data.num_test=600",
    "data.num_clients=3",
    "data.partition=pathological",
    "data.classes_per_client=2",
    "rounds=2",
    "epochs=0.5",
    "fedcollab.c=1",
    "fedcollab.restarts=5",
    "fedcollab.distance_rounds=3",
    "fedcollab.distance_local_steps=20",
    "fedcollab.distance_lr=0.05",
    "equilibrium.init_epochs=1",
    "equilibrium.spo_hypernet_steps=3",
    "equilibrium.spo_search_steps=2",
]


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("coalitions")
    overrides = [*SETTINGS, f"data.cache_dir={json.dumps(str(root / 'cache'))}"]
    flags = [arg for o in overrides for arg in ("--set", o)]
    methods = ["--methods", ",".join(METHODS)]
    _invoke(
        "federation", "up", "--tls", *flags, *methods,
        "--out", str(root / "real"), "--timeout", "400",
    )  # fmt: skip
    _invoke("compare", *flags, *IN_THIS_PROCESS, *methods, "--out", str(root / "inprocess"))
    return root / "real", root / "inprocess"


@pytest.mark.parametrize("method", METHODS)
def test_real_federation_equals_in_process_runtime(runs, method):
    real, inprocess = (read_run(path / safe_name(method)) for path in runs)
    assert real.coalitions == inprocess.coalitions
    assert sorted(real.coalitions) == [0, 1]
    assert len(real.rows) == len(inprocess.rows) == 2 * 3
    for a, b in zip(real.rows, inprocess.rows, strict=True):
        assert (a["round"], a["client"]) == (b["round"], b["client"])
        for key in ("best_test_acc", "test_acc", "val_acc"):
            assert a[key] == pytest.approx(b[key], abs=1e-9), (a["round"], a["client"], key)
        assert a["coordinator_bytes"] == b["coordinator_bytes"]
        assert a["bytes_fetched"] == b["bytes_fetched"]


def test_coordinator_stored_the_coalitions(runs):
    real = runs[0]
    with CoordinatorState(real / "federation" / "coordinator" / "coordinator.db") as state:
        for method in METHODS:
            run = next(r for r in state.runs() if r.method == method)
            assert run.status == "finished"
            stored = state.coalitions(run.run_id)
            assert stored == read_run(real / safe_name(method)).coalitions


def test_the_distance_steps_took_no_flower_message_of_their_own(runs):
    """Round 0 (estimation, then training) took as many answered Flower messages as round 1
    (training only): the discriminator steps went through the relay."""
    records = [
        json.loads(line) for line in (runs[0] / safe_name("fedcollab") / MESSAGES_FILE).open()
    ]
    rounds = [r["round"] for r in records if r["kind"] == "message"]
    assert rounds.count(0) == rounds.count(1) > 0
    seats = sorted((r["round"], r["client"], r["steps"]) for r in records if r["kind"] == "seat")
    assert seats == [(0, k, 3) for k in range(3)]  # one seat each, serving all 3 steps


@pytest.mark.parametrize("method", ["fedcollab", "equilibrium:ocs=spo"])
def test_the_search_moved_its_models_through_the_coordinator(runs, method):
    rows = read_run(runs[0] / safe_name(method)).rows
    first = [r for r in rows if r["round"] == 0]
    later = [r for r in rows if r["round"] == 1]
    # Round 0 carries the discriminators (FedCollab) or SPO's target models and gradients on
    # top of the coalition models.
    assert min(r["coordinator_bytes"] for r in first) > max(r["coordinator_bytes"] for r in later)


def test_each_seat_took_one_flower_message_and_no_step_took_one(runs):
    """Each client's SuperNode received one ``query.substeps`` message per seat the runs
    recorded for it (a seat serves all of a round's steps), and never a per-step one."""
    real = runs[0]
    seats = [0] * 3
    for method in METHODS:
        for line in (real / safe_name(method) / MESSAGES_FILE).open():
            record = json.loads(line)
            if record["kind"] == "seat":
                seats[record["client"]] += 1
    assert seats[0] > 0
    for k in range(3):
        log = (real / "federation" / f"client-{k}" / "supernode.log").read_text()
        assert log.count("Receiving: query.substeps") == seats[k], (k, seats)
        assert "query.discriminate" not in log
