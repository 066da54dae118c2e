"""An operator stops a real federation's run: it ends as stopped, and its records say so."""

from __future__ import annotations

import json

from federation_faults import make_federation, start_run, wait_for

from collabfl.coordinator.report.run_dir import read_run


def test_a_stopped_run_ends_stopped_with_a_summary_that_says_so(tmp_path):
    rounds = 50  # far more than it will run
    config, federation = make_federation(tmp_path, clients=3, rounds=rounds)
    out = tmp_path / "out"
    with federation:
        run_id = start_run(federation, config, out, timeout=120)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        with federation.client() as client:
            client.stop_run(run_id)
        run = wait_for(federation, run_id, lambda r: not r.active)
    assert run.status == "stopped", run.message
    records = read_run(out / "dpfl")
    done = max(int(r["round"]) for r in records.rows) + 1
    assert records.summary is not None
    assert records.summary["status"] == "stopped"
    assert (records.summary["rounds"], records.summary["rounds_planned"]) == (done, rounds)
    assert done < rounds
    table = (out / "results.md").read_text()
    assert f"dpfl (stopped after {done}/{rounds} rounds)" in table
    assert json.loads((out / "summary.json").read_text())[0]["status"] == "stopped"
