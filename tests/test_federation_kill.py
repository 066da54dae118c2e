"""A client daemon killed mid-run in a real federation: skipped, then rejoins."""

from __future__ import annotations

from federation_faults import make_federation, start_run, wait_for

from collabfl.coordinator.report.run_dir import read_run


def test_killed_client_is_skipped_and_rejoins(tmp_path):
    rounds = 4
    config, federation = make_federation(tmp_path, clients=4, rounds=rounds)
    out = tmp_path / "out"
    with federation:
        run_id = start_run(federation, config, out, timeout=30)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        federation.kill("client-3")
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 1)
        federation.restart("client-3")
        run = wait_for(federation, run_id, lambda r: not r.active)
        with federation.client() as client:
            events = client.list_events(run_id)
    assert run.status == "finished", run.message
    records = read_run(out / "dpfl")
    by_round = {t: {r["client"] for r in records.rows if r["round"] == t} for t in range(rounds)}
    assert by_round[0] == {0, 1, 2, 3}
    missed = [t for t in range(1, rounds) if 3 not in by_round[t]]
    assert missed, "client 3 was killed but reported every round"
    assert 3 in by_round[rounds - 1], "client 3 did not rejoin"
    assert all({0, 1, 2} <= by_round[t] for t in range(rounds)), "the others must go on"
    assert any(e.client_id == 3 and e.kind in {"no_reply", "offline"} for e in events)
    for t in missed:  # nobody aggregated the vanished client's model
        assert records.graphs[t][:, 3].sum() == 0
