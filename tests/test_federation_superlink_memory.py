"""A TLS federation with the SuperLink's state in memory (the daemon's default) survives the
restarts that wipe that state: its SuperLink SIGKILLed mid-run (the daemon's Supervisor starts
a fresh one), and the whole coordinator daemon SIGKILLed and started again. Each time every
SuperNode key bound in coordinator.db is registered again under a new Flower node id, the
SuperNodes join again, and the run finishes with every client in every round. Before the
keys were restored, a fresh SuperLink refused every SuperNode (HTTP 412, "No SuperNode found
with the given public key") and the run never ended."""

from __future__ import annotations

import os
import signal

import pytest
from federation_faults import fault_config, rounds_of, start_run, wait_for

from collabfl.coordinator.store.state import CoordinatorState
from collabfl.launcher.federation import LocalFederation, write_client_files

pytestmark = pytest.mark.federation

CLIENTS, ROUNDS = 3, 4


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory-state")
    config = fault_config(root, CLIENTS, ROUNDS)
    files = write_client_files(config, root / "data")
    with LocalFederation(root / "work", files, tls=True) as federation:
        yield config, federation, root


def bindings(federation: LocalFederation) -> dict[int, int]:
    with CoordinatorState(federation.coordinator_dir / "coordinator.db") as state:
        return {client: node for node, client in state.supernode_bindings().items()}


def finishes_with_every_client(federation, config, out, crash) -> dict[int, int]:
    """Start a run, ``crash()`` once round 1 is recorded, and check the run then finishes
    with every client in every round; returns the bindings from before the crash."""
    run_id = start_run(federation, config, out, timeout=120, run_id=out.name)
    wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 1)
    before = bindings(federation)
    assert sorted(before) == list(range(CLIENTS))
    crash()
    run = wait_for(federation, run_id, lambda r: not r.active, limit_s=400)
    assert run.status == "finished", run.message
    assert rounds_of(out) == {t: set(range(CLIENTS)) for t in range(ROUNDS)}
    return before


def test_a_superlink_killed_mid_run_gets_the_keys_back(federation):
    config, federation, root = federation
    pid_file = federation.coordinator_dir / "superlink.pid"
    killed = int(pid_file.read_text())

    def kill_superlink() -> None:
        os.killpg(killed, signal.SIGKILL)

    before = finishes_with_every_client(federation, config, root / "superlink-kill", kill_superlink)
    assert int(pid_file.read_text()) != killed, "the Supervisor started a new SuperLink"
    after = bindings(federation)
    assert sorted(after) == sorted(before)
    assert all(after[c] != before[c] for c in before), "Flower gave every key a new node id"


def test_a_coordinator_killed_mid_run_gets_the_keys_back(federation):
    config, federation, root = federation

    def kill_coordinator() -> None:
        federation.kill("coordinator")
        federation.restart("coordinator")

    before = finishes_with_every_client(
        federation, config, root / "coordinator-kill", kill_coordinator
    )
    after = bindings(federation)
    assert all(after[c] != before[c] for c in before), "Flower gave every key a new node id"
