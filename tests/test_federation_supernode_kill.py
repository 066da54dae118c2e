"""A client's SuperNode SIGKILLed while it holds a round's message, in a TLS federation
(issue #32, 3).

The message the killed SuperNode had pulled dies with it. Its daemon marks the dead node
offline on the SuperLink as soon as it sees it die, so the round in flight stops waiting for
that reply within seconds, not at the message deadline (here far longer than the test's
patience), and records the client as skipped, offline, with the reason; the other clients'
replies of that round are kept, and the restarted SuperNode takes part in a later round.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from federation_faults import POLL_S, fault_config, rounds_of, start_run, wait_for, wait_holding

from collabfl.apps.pool import LOST_WITH_NODE
from collabfl.launcher.federation import LocalFederation, write_client_files

pytestmark = pytest.mark.federation

CLIENTS = 3
KILLED = 2
MESSAGE_TIMEOUT_S = 300.0
STALL_LIMIT_S = 45.0
"""How long the round in flight may take after the kill: the dead node's reply is given up
within seconds, and the rest is a loaded CI machine's round (the message deadline is
``MESSAGE_TIMEOUT_S``)."""


def test_a_killed_supernode_costs_its_round_seconds_and_rejoins(tmp_path):
    config = fault_config(tmp_path, CLIENTS, 200)
    files = write_client_files(config, tmp_path / "data")
    with LocalFederation(tmp_path / "work", files, tls=True) as federation:
        out = tmp_path / "run"
        run_id = start_run(federation, config, out, timeout=MESSAGE_TIMEOUT_S)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        state = federation.client_dir(KILLED)
        wait_holding(state / "supernode.log")
        os.kill(int((state / "supernode.pid").read_text()), signal.SIGKILL)
        killed = time.monotonic()
        in_flight = wait_for(federation, run_id, lambda r: True).last_completed_round + 1
        wait_for(
            federation, run_id, lambda r: (r.last_completed_round or -1) >= in_flight,
            limit_s=STALL_LIMIT_S,
        )  # fmt: skip
        stalled = time.monotonic() - killed
        deadline = time.monotonic() + 300
        while not any(KILLED in who for t, who in rounds_of(out).items() if t > in_flight):
            assert time.monotonic() < deadline, "the restarted SuperNode never took part again"
            time.sleep(POLL_S)
        with federation.client() as client:
            client.stop_run(run_id)
            events = [e for e in client.list_events(run_id) if e.client_id == KILLED]
        wait_for(federation, run_id, lambda r: not r.active)
    by_round = rounds_of(out)
    others = set(range(CLIENTS)) - {KILLED}
    assert all(others <= by_round[t] for t in range(in_flight + 1)), by_round
    assert KILLED not in by_round[in_flight], by_round  # its reply died with its SuperNode
    lost = [e for e in events if e.round == in_flight]
    assert [(e.kind, e.message) for e in lost] == [("offline", LOST_WITH_NODE)], events
    assert "rejoined" in [e.kind for e in events if e.round > in_flight], events
    print(f"the round in flight ended {stalled:.1f} s after the kill")
