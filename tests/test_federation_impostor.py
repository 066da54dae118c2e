"""A second daemon claiming a member's client id mid-run (insecure loopback federation):
refused, recorded as an event, never instructed; the real member keeps its place."""

from __future__ import annotations

from federation_faults import make_federation, start_run, wait_for

from collabfl.coordinator.federation import client_command, free_ports
from collabfl.coordinator.report.run_dir import read_run


def test_impostor_claiming_a_bound_client_id_is_refused(tmp_path):
    """The run is long enough never to end by itself; it is stopped two rounds after the
    impostor's node is online, so the coordinator has met it whatever the machine's speed."""
    config, federation = make_federation(tmp_path, clients=2, rounds=200)
    out = tmp_path / "out"
    impostor_dir = tmp_path / "impostor"
    with federation:
        run_id = start_run(federation, config, out, timeout=30)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        peer, runtime = free_ports(2)
        key = federation.coordinator_dir / "grant_key.pub.pem"
        impostor = client_command(
            1, federation.client_files[0], impostor_dir, federation.superlink, peer, runtime, key
        )
        federation._spawn("impostor", impostor)  # stopped with the federation
        federation.wait_online(3, timeout_s=60)
        with federation.client() as client:
            seen = client.get_run(run_id).last_completed_round or 0
        # Each round's first message asks Flower for new nodes: the impostor is met by then.
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= seen + 2)
        with federation.client() as client:
            client.stop_run(run_id)
        run = wait_for(federation, run_id, lambda r: not r.active)
        with federation.client() as client:
            events = client.list_events(run_id)
    assert run.status == "stopped", run.message
    refused = [e for e in events if e.kind == "impostor"]
    assert len(refused) == 1 and refused[0].client_id == 1, events
    records = read_run(out / "dpfl")
    done = sorted({r["round"] for r in records.rows})
    assert done[-1] >= seen + 2
    assert all({r["client"] for r in records.rows if r["round"] == t} == {0, 1} for t in done)
    assert not (impostor_dir / "progress.json").exists(), "the impostor got an instruction"
