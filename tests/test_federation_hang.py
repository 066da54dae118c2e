"""A client that hangs mid-run (every process of it SIGSTOPped) in a real federation.

The round it hangs in ends at the message deadline without it; the other clients' peer
fetches do not wait on it past their peer deadline, and the rounds after go on without
anyone waiting for it, until it is let go again.
"""

from __future__ import annotations

import signal

from federation_faults import make_federation, process_tree, send_signal, start_run, wait_for

from collabfl.coordinator.report.run_dir import read_run


def test_hung_client_is_skipped_and_does_not_stall_the_federation(tmp_path):
    rounds = 5
    config, federation = make_federation(tmp_path, clients=4, rounds=rounds)
    out = tmp_path / "out"
    with federation:
        run_id = start_run(federation, config, out, timeout=20)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        hung = process_tree(federation.processes["client-3"].pid)
        send_signal(hung, signal.SIGSTOP)
        try:
            wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 2)
        finally:
            send_signal(hung, signal.SIGCONT)
        run = wait_for(federation, run_id, lambda r: not r.active)
        with federation.client() as client:
            events = client.list_events(run_id)
    assert run.status == "finished", run.message
    records = read_run(out / "dpfl")
    by_round = {t: {r["client"] for r in records.rows if r["round"] == t} for t in range(rounds)}
    assert all({0, 1, 2} <= by_round[t] for t in range(rounds)), "the others must go on"
    missed = [t for t in range(1, rounds) if 3 not in by_round[t]]
    assert missed, "client 3 was hung but reported every round"
    assert any(e.client_id == 3 and e.kind in {"no_reply", "offline"} for e in events)
    for t in missed:  # nobody aggregated the hung client's model
        assert records.graphs[t][:, 3].sum() == 0
