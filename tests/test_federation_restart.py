"""The coordinator (SuperLink, service, ServerApp) killed and restarted mid-run: by the time
the restarted coordinator serves, nothing the killed one started still runs (its ServerApp
would otherwise retry its dead SuperLink), and the run resumes after its last completed
round and ends exactly as an uninterrupted one."""

from __future__ import annotations

import json

import pytest
from federation_faults import (
    BASE,
    federation_processes,
    make_federation,
    process_tree,
    running_processes,
    start_run,
    still_running,
    wait_for,
)

from collabfl.coordinator.store.state import CoordinatorState
from collabfl.engine.report.run_dir import read_run

pytestmark = pytest.mark.federation


@pytest.fixture
def uninterrupted(tmp_path_factory):
    """The same run in the in-process runtime, for comparison."""
    from typer.testing import CliRunner

    from collabfl.cli.main import app

    root = tmp_path_factory.mktemp("reference")
    flags = [
        *BASE,
        "data.num_clients=3",
        "rounds=4",
        f"data.cache_dir={json.dumps(str(root / 'cache'))}",
    ]
    args = [arg for f in flags for arg in ("--set", f)]
    result = CliRunner().invoke(app, ["simulate", *args, "--out", str(root / "run")])
    assert result.exit_code == 0, result.output
    return read_run(root / "run" / "dpfl").rows


def test_coordinator_restart_resumes_the_run_exactly(tmp_path, uninterrupted):
    config, federation = make_federation(tmp_path, clients=3, rounds=4)
    out = tmp_path / "out"
    with federation:
        run_id = start_run(federation, config, out, timeout=120)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 1)
        killed = running_processes(process_tree(federation.processes["coordinator"].pid))
        federation.kill("coordinator")
        federation.restart("coordinator")
        wait_for(federation, run_id, lambda r: True)  # the restarted coordinator serves
        left = still_running(killed)
        serverapps = [c for _, c in killed.values() if "serverapp_template" in c]
        assert len(serverapps) >= 2, killed  # the template, and the run's ServerApp it forked
        assert not left, f"processes of the killed coordinator outlived its restart: {left}"
        run = wait_for(federation, run_id, lambda r: not r.active, limit_s=400)
    assert not federation_processes(federation.work_dir), "outlived the teardown"
    assert run.status == "finished", run.message
    with CoordinatorState(federation.coordinator_dir / "coordinator.db") as state:
        kinds = [e.kind for e in state.events(run_id)]
    assert "resumed" in kinds
    rows = read_run(out / "dpfl").rows
    assert [(r["round"], r["client"]) for r in rows] == [
        (r["round"], r["client"]) for r in uninterrupted
    ]
    for resumed, reference in zip(rows, uninterrupted, strict=True):
        assert resumed["best_test_acc"] == pytest.approx(reference["best_test_acc"], abs=1e-9)
        assert resumed["num_collaborators"] == reference["num_collaborators"]
