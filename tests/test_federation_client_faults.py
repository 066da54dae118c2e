"""A client that goes away mid-run in a real federation: killed (then restarted), or hung
(every process of it SIGSTOPped, then let go).

A killed client is skipped, then rejoins. The round a hung client hangs in ends at the
message deadline without it; the other clients' peer fetches do not wait on it past their
peer deadline, and the rounds after go on without anyone waiting for it, until it is let go
again.

Below its quorum (here: every client) a run pauses, naming who is missing, resumes when they
are back, and fails, saying so, when they are not back in time.

All tests run in one 4-client federation, one run each (a federation's start-up costs
more CPU than either run), in this order: the hung client, let go, reports again within its
run, and the kill test, which checks that every client reported the first round, goes last
because a killed SuperNode's node stays listed until its heartbeat lapses, which the first
round of a run after it would wait on. The quorum tests stop client 3 cleanly (its SuperNode
leaves at once) and come last; the last leaves it stopped.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from federation_faults import (
    assert_skipped_while_gone,
    fault_config,
    make_federation,
    process_tree,
    send_signal,
    start_run,
    wait_event,
    wait_for,
)

from collabfl.kernel.supervisor import stop_group
from collabfl.launcher.federation import LocalFederation

pytestmark = pytest.mark.federation

CLIENTS = 4
GONE = "client-3"


@dataclass
class Shared:
    root: Path
    federation: LocalFederation


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[Shared]:
    """The federation both tests run in; their run directories lie under ``root``."""
    root = tmp_path_factory.mktemp("faults")
    _, federation = make_federation(root, clients=CLIENTS, rounds=1)
    with federation:
        yield Shared(root, federation)


def begin(shared: Shared, name: str, rounds: int, timeout: float, *extra: str) -> tuple[str, Path]:
    """Start run ``name`` (its directory under the shared root; ``extra``: config
    overrides) and wait for its round 0."""
    config = fault_config(shared.root, CLIENTS, rounds, *extra)
    out = shared.root / name
    run_id = start_run(shared.federation, config, out, timeout=timeout, run_id=name)
    wait_for(shared.federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
    return run_id, out


def finish(shared: Shared, run_id: str, out: Path, rounds: int) -> dict[int, set[int]]:
    """Wait for the run to end; check it finished and skipped client 3 only while it was
    gone; return who reported each round."""
    run = wait_for(shared.federation, run_id, lambda r: not r.active)
    with shared.federation.client() as client:
        events = client.list_events(run_id)
    assert run.status == "finished", run.message
    by_round = assert_skipped_while_gone(out, events, rounds)
    assert by_round[0] == {0, 1, 2, 3}, "client 3 was not in the run's first round"
    return by_round


def test_hung_client_is_skipped_and_does_not_stall_the_federation(shared):
    rounds = 5
    run_id, out = begin(shared, "hung", rounds, timeout=20)
    hung = process_tree(shared.federation.processes[GONE].pid)
    send_signal(hung, signal.SIGSTOP)
    try:
        wait_for(shared.federation, run_id, lambda r: (r.last_completed_round or -1) >= 2)
    finally:
        send_signal(hung, signal.SIGCONT)
    by_round = finish(shared, run_id, out, rounds)
    assert 3 in by_round[rounds - 1], "client 3, let go, did not report again"


def test_killed_client_is_skipped_and_rejoins(shared):
    rounds = 4
    run_id, out = begin(shared, "killed", rounds, timeout=30)
    shared.federation.kill(GONE)
    wait_for(shared.federation, run_id, lambda r: (r.last_completed_round or -1) >= 1)
    shared.federation.restart(GONE)
    by_round = finish(shared, run_id, out, rounds)
    assert 3 in by_round[rounds - 1], "client 3 did not rejoin"
    with shared.federation.client() as client:
        kinds = [e.kind for e in client.list_events(run_id) if e.client_id == GONE]
    if "offline" in kinds:  # skipped as offline (not only silent): its return is recorded
        assert "rejoined" in kinds[kinds.index("offline") :], kinds


def test_run_below_quorum_pauses_and_resumes_when_the_client_is_back(shared):
    # Rounds go on while client 3 stops (3.6 s under load here, several rounds): enough of
    # them that the run cannot end before it is gone.
    rounds = 12
    run_id, out = begin(shared, "paused", rounds, 15, "federation.quorum=4")
    stop_group(shared.federation.processes[GONE], grace_s=15)
    with shared.federation.client() as client:
        run = client.get_run(run_id)
    # The round under way may still count client 3 in; a later one must start without it.
    assert run.active and (run.last_completed_round or 0) < rounds - 2, (
        f"the run reached its last round ({run.status}, round {run.last_completed_round} "
        "done) before client 3 had stopped: give it more rounds"
    )
    lost = wait_event(shared.federation, run_id, "quorum_lost")
    assert "client 3" in lost.message, lost.message
    shared.federation.restart(GONE)
    wait_event(shared.federation, run_id, "quorum_regained")
    run = wait_for(shared.federation, run_id, lambda r: not r.active)
    assert run.status == "finished", run.message
    summary = json.loads((out / "dpfl" / "summary.json").read_text())
    assert summary["rounds"] == rounds and summary["rounds_by_participants"].get("0") is None


def test_run_below_quorum_fails_after_its_wait(shared):
    rounds = 30
    run_id, out = begin(
        shared, "lost", rounds, 15, "federation.quorum=4", "federation.quorum_wait_s=2"
    )
    stop_group(shared.federation.processes[GONE], grace_s=15)
    run = wait_for(shared.federation, run_id, lambda r: not r.active)
    assert run.status == "failed", f"{run.status}: {run.message}"
    assert "quorum" in run.message and "client 3" in run.message, run.message
    summary = json.loads((out / "dpfl" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds"] < rounds
    by_participants = summary["rounds_by_participants"]
    assert by_participants["4"] >= 1 and sum(by_participants.values()) == summary["rounds"]
