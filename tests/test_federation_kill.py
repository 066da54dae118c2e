"""A client daemon killed mid-run in a real federation: skipped, then rejoins."""

from __future__ import annotations

from federation_faults import assert_skipped_while_gone, make_federation, start_run, wait_for


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
    by_round = assert_skipped_while_gone(out, events, rounds)
    assert by_round[0] == {0, 1, 2, 3}
    assert 3 in by_round[rounds - 1], "client 3 did not rejoin"
