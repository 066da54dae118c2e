"""An operator stops a real federation's run, after a second daemon claimed a member's client
id mid-run (insecure loopback federation). The run ends as stopped and its records say so;
the impostor is refused, recorded as an event and never instructed, and the real member
keeps its place. Both tests read the one run the module fixture drives."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from federation_faults import make_federation, start_run, wait_for, wait_logged

from collabfl.engine.report.run_dir import read_run
from collabfl.flower.processes import SUPERNODE_CONNECTED
from collabfl.kernel.ports import PortReservation
from collabfl.launcher.federation import client_command

pytestmark = pytest.mark.federation

CLIENTS = 3
ROUNDS = 200  # far more than it will run: it ends only when stopped
IMPOSTOR_ID = 1


@dataclass
class StoppedRun:
    out: Path
    impostor_dir: Path
    status: str
    message: str
    events: list
    met_at: int
    """The last completed round when the impostor's SuperNode had connected."""


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> StoppedRun:
    """The run is stopped two rounds after the impostor's node is online, so the coordinator
    has met it whatever the machine's speed."""
    root = tmp_path_factory.mktemp("stopped")
    config, federation = make_federation(root, clients=CLIENTS, rounds=ROUNDS)
    out, impostor_dir = root / "out", root / "impostor"
    with federation, PortReservation(2) as impostor_ports:
        run_id = start_run(federation, config, out, timeout=30)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        peer, runtime = impostor_ports.ports
        key = federation.coordinator_dir / "grant_key.pub.pem"
        impostor = client_command(
            IMPOSTOR_ID, federation.client_files[0], impostor_dir, federation.superlink,
            peer, runtime, key,
        )  # fmt: skip
        federation._spawn("impostor", impostor)  # stopped with the federation
        wait_logged(impostor_dir / "supernode.log", SUPERNODE_CONNECTED)
        with federation.client() as client:
            met_at = client.get_run(run_id).last_completed_round or 0
        # Each round's first message asks Flower for new nodes: the impostor is met by then.
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= met_at + 2)
        with federation.client() as client:
            client.stop_run(run_id)
        run = wait_for(federation, run_id, lambda r: not r.active)
        with federation.client() as client:
            events = client.list_events(run_id)
    return StoppedRun(out, impostor_dir, run.status, run.message, events, met_at)


def test_a_stopped_run_ends_stopped_with_a_summary_that_says_so(stopped):
    assert stopped.status == "stopped", stopped.message
    records = read_run(stopped.out / "dpfl")
    done = max(int(r["round"]) for r in records.rows) + 1
    assert records.summary is not None
    assert records.summary["status"] == "stopped"
    assert (records.summary["rounds"], records.summary["rounds_planned"]) == (done, ROUNDS)
    assert done < ROUNDS
    table = (stopped.out / "results.md").read_text()
    assert f"dpfl (stopped after {done}/{ROUNDS} rounds)" in table
    assert json.loads((stopped.out / "summary.json").read_text())[0]["status"] == "stopped"


def test_impostor_claiming_a_bound_client_id_is_refused(stopped):
    assert stopped.status == "stopped", stopped.message
    refused = [e for e in stopped.events if e.kind == "impostor"]
    assert len(refused) == 1 and refused[0].client_id == IMPOSTOR_ID, stopped.events
    records = read_run(stopped.out / "dpfl")
    done = sorted({r["round"] for r in records.rows})
    assert done[-1] >= stopped.met_at + 2
    members = set(range(CLIENTS))
    assert all({r["client"] for r in records.rows if r["round"] == t} == members for t in done)
    assert not (stopped.impostor_dir / "progress.json").exists(), "the impostor got an instruction"
