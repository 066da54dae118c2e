"""A run ticket dies with its run: participants refuse it once the coordinator says the run
ended, well before ``--run-ticket-ttl``.

The coordinator's real public gateway publishes ended runs beside revoked certificates (the
daemon's own ``ended_runs`` window), a participant's real revocation poller keeps them in
its state directory, and the participant's gate and ClientApp, driven as Flower drives
them, read that file with the node config a client daemon sets.
"""

from __future__ import annotations

import json
import os
import ssl
import stat
import urllib.request
from functools import partial
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk

from collabfl.apps.client_app import RunNotAuthorized
from collabfl.client.revocations import RevocationPoller
from collabfl.coordinator.daemon import ended_runs
from collabfl.coordinator.superlink.run_launcher import write_app
from collabfl.flower.app_gate import RefusedTask, check_task, verify_ticket
from collabfl.kernel.tickets import InvalidTicket, TicketSigner, run_key
from tests.test_client_app_tickets import KEY, _context, _setup, flower_task  # noqa: F401
from tests.test_enrolment import _start

WEEK = 7 * 24 * 3600.0


@pytest.fixture
def coordinator(tmp_path):
    yield from _start(tmp_path / "coordinator", ended_runs=lambda s: partial(ended_runs, WEEK, s))


def _participant(tmp_path: Path, coordinator, run: str, ticket: str):
    """A participant's Flower context for ``run`` and its poller, which keeps the ended runs
    where the client daemon's node config says."""
    ended = tmp_path / "state" / "ended-runs.json"
    context = _context(tmp_path, {"run-id": run, "run-ticket": ticket})
    context.node_config["ended-runs"] = str(ended)
    return context, RevocationPoller(coordinator.address, coordinator.files.ca, ended_runs=ended)


def test_a_ticket_is_refused_once_its_run_has_ended(tmp_path, coordinator):
    coordinator.state.create_run("r1", "fedavg", {})
    ticket = TicketSigner(KEY).issue("r1", ttl_s=WEEK)
    context, poller = _participant(tmp_path, coordinator, "r1", ticket)
    fab = build_fab_from_disk(write_app(tmp_path / "app"))
    poller.refresh()
    assert verify_ticket(context.node_config, context.run_config) == "r1"
    check_task(context.node_config, context.run_config, fab, flower_run=7)
    assert _setup(context).content is not None

    coordinator.state.finish_run("r1", "finished")
    poller.refresh()
    ended = Path(context.node_config["ended-runs"])
    assert stat.S_IMODE(os.stat(ended).st_mode) == 0o600
    with pytest.raises(InvalidTicket, match=r"run 'r1' has ended \(finished at .*\); its ticket"):
        verify_ticket(context.node_config, context.run_config)
    with pytest.raises(RefusedTask, match="has ended"):
        check_task(context.node_config, context.run_config, fab, flower_run=7)
    with pytest.raises(RunNotAuthorized, match="has ended"):
        _setup(context)


def test_a_resumed_run_serves_its_new_ticket_and_never_the_old_one(tmp_path, coordinator):
    coordinator.state.create_run("r2", "fedavg", {})
    old = TicketSigner(KEY).issue("r2", ttl_s=WEEK)
    coordinator.state.finish_run("r2", "stopped", "stopped by the operator")
    coordinator.state.create_run("r2", "fedavg", {})  # resumed: running again
    new = TicketSigner(KEY).issue("r2", ttl_s=WEEK)
    context, poller = _participant(tmp_path, coordinator, "r2", new)
    poller.refresh()
    assert verify_ticket(context.node_config, context.run_config) == "r2"
    context.run_config["run-ticket"] = old
    with pytest.raises(InvalidTicket, match=r"has ended \(stopped"):
        verify_ticket(context.node_config, context.run_config)


def test_only_runs_ended_within_a_ticket_lifetime_are_published(tmp_path, coordinator):
    coordinator.state.create_run("r3", "fedavg", {})
    coordinator.state.finish_run("r3", "failed", "the ServerApp kept dying")
    assert set(ended_runs(WEEK, coordinator.state)) == {"r3"}
    assert coordinator.state.run_ends(since=float("inf")) == {}
    coordinator.state.create_run("r5", "fedavg", {})
    coordinator.state.finish_run("r5", "finished")
    assert set(coordinator.state.run_ends(since=0.0, limit=1)) == {"r5"}  # the latest


def test_a_damaged_ended_runs_file_refuses_every_ticket(tmp_path, coordinator):
    coordinator.state.create_run("r4", "fedavg", {})
    context, _ = _participant(tmp_path, coordinator, "r4", TicketSigner(KEY).issue("r4", WEEK))
    Path(context.node_config["ended-runs"]).parent.mkdir(parents=True, exist_ok=True)
    Path(context.node_config["ended-runs"]).write_text('{"r4": "soon"}')
    with pytest.raises(InvalidTicket, match=r"ended runs in .* are unreadable"):
        verify_ticket(context.node_config, context.run_config)


def test_the_public_list_names_no_run(tmp_path, coordinator):
    """The list is served to anyone who reaches the public port: runs go by their id's hash."""
    coordinator.state.create_run("hospital-a-study", "fedavg", {})
    coordinator.state.finish_run("hospital-a-study", "finished")
    context = ssl.create_default_context(cafile=str(coordinator.files.ca))
    url = f"https://{coordinator.address}/collabfl/v1/revoked"
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        body = response.read().decode()
    assert "hospital" not in body
    assert run_key("hospital-a-study") in json.loads(body)["ended_runs"]
