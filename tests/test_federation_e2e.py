"""The real federation end to end: SuperLink, SuperNodes, peer gRPC servers, SQLite.

``collabfl federation up`` starts a coordinator daemon and client daemons as real processes
on loopback and runs DPFL, pFedGraph and iPFL through them; the results must equal the
in-process runtime's on the same seed and config, every DPFL graph must respect the budget,
and in DPFL the coordinator must never have carried a model. The client daemons run the warm
runtime (one long-lived executor per client), which serves every message of a client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.engine.report.graph_stats import adjacency
from collabfl.engine.report.run_dir import read_run
from tests.support.cli_runs import IN_THIS_PROCESS
from tests.support.runtime_equality import BUDGET, SETTINGS, assert_same_rows

pytestmark = pytest.mark.federation


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("federation")
    flags = _flags(root)
    methods = ["--methods", "dpfl,pfedgraph,ipfl"]
    # In-process first, on an empty cache: the side that generates MNIST-1D must equal the
    # side that reads it back (a fresh clone once gave other numbers than every later run).
    _invoke("compare", *flags, *IN_THIS_PROCESS, *methods, "--out", str(root / "inprocess"))
    _invoke(
        "federation", "up", *flags, *methods, "--runtime", "warm",
        "--out", str(root / "real"), "--timeout", "400",
    )  # fmt: skip
    return root / "real", root / "inprocess"


def _flags(root: Path) -> list[str]:
    overrides = [*SETTINGS, f"data.cache_dir={json.dumps(str(root / 'cache'))}"]
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.mark.parametrize("method", ["dpfl", "pfedgraph", "ipfl"])
def test_real_federation_equals_in_process_runtime(runs, method):
    assert_same_rows(runs[0] / method, runs[1] / method, method)


def test_warm_runtime_serves_each_client_from_one_process(runs):
    for k in range(3):
        log = (runs[0] / "federation" / f"client-{k}" / "executor.log").read_text()
        handled = re.findall(r"task (\w+) by pid (\d+)", log)
        assert len(handled) > 3, log  # set-up, then several messages per round
        assert {status for status, _ in handled} == {"completed"}, log
        assert len({pid for _, pid in handled}) == 1, log


def test_graphs_respect_budget_and_match_the_coordinator_record(runs):
    real = runs[0]
    records = read_run(real / "dpfl")
    assert sorted(records.graphs) == [0, 1, 2]
    for matrix in records.graphs.values():
        assert (matrix > 0).sum(axis=1).max() <= BUDGET
    assert all(row["peak_peer_models"] <= BUDGET for row in records.rows)
    with CoordinatorState(real / "federation" / "coordinator" / "coordinator.db") as state:
        run = next(r for r in state.runs() if r.method == "dpfl")
        assert run.status == "finished" and run.last_completed_round == 2
        history = state.graph_history(run.run_id)
        metrics = state.metrics(run.run_id)
    assert [g.round for g in history] == [0, 1, 2]
    for graph in history:
        recorded = adjacency(graph.num_clients, graph.edges)
        np.testing.assert_allclose(recorded, records.graphs[graph.round])
    assert set(metrics[2]) == {0, 1, 2}


def test_coordinator_never_carried_model_weights(runs):
    records = read_run(runs[0] / "dpfl")
    assert all(row["coordinator_bytes"] == 0 for row in records.rows)
    assert sum(row["bytes_fetched"] for row in records.rows) > 0  # peers did exchange models
    assert records.summary["coordinator_bytes_per_client_round"] == 0


def test_run_directory_matches_simulate_layout(runs):
    real, inprocess = runs
    expected = {
        p.relative_to(inprocess).as_posix()
        for p in inprocess.rglob("*")
        if p.is_file() and "checkpoint" not in p.parts
    }
    produced = {p.relative_to(real).as_posix() for p in real.rglob("*") if p.is_file()}
    assert expected <= produced


def test_each_serverapps_log_is_followed_into_the_run_folder(runs):
    """The daemon streams each Flower run's log (no ``flwr log`` process) into serverapp.log
    of the run's folder, here one folder for the three methods."""
    log = (runs[0] / "serverapp.log").read_text()
    assert log.count("Start `flwr-serverapp` process") == 3, log
    for method in ("dpfl", "pfedgraph", "ipfl"):
        assert f"run {method}-" in log, log
