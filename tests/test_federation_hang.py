"""A client that hangs mid-run (every process of it SIGSTOPped) in a real federation.

The round it hangs in ends at the message deadline without it; the other clients' peer
fetches do not wait on it past their peer deadline, and the rounds after go on without
anyone waiting for it, until it is let go again.
"""

from __future__ import annotations

import signal

from federation_faults import (
    assert_skipped_while_gone,
    make_federation,
    process_tree,
    send_signal,
    start_run,
    wait_for,
)


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
    assert_skipped_while_gone(out, events, rounds)
