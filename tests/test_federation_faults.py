"""Faults in a real federation, with real processes: a client daemon killed mid-run, and a
coordinator (SuperLink, service, ServerApp) killed and restarted mid-run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from collabfl.coordinator.config import load_config
from collabfl.coordinator.federation import LocalFederation, write_client_files
from collabfl.coordinator.methods import parse_method_spec, run_request
from collabfl.coordinator.report.run_dir import read_run
from collabfl.coordinator.state import CoordinatorState

BASE = [
    "data.num_train=1500",
    "data.num_test=600",
    "epochs=0.5",
    "dpfl.init_epochs=1",
    "dpfl.budget=inf",
]


def _federation(root: Path, clients: int, rounds: int):
    config = load_config(
        None,
        [
            *BASE,
            f"data.num_clients={clients}",
            f"rounds={rounds}",
            f"data.cache_dir={json.dumps(str(root / 'cache'))}",
        ],
    )
    files = write_client_files(config, root / "data")
    return config, LocalFederation(root / "work", files)


def _start_run(federation: LocalFederation, config, out: Path, timeout: float) -> str:
    spec = parse_method_spec("dpfl", config)
    run_id = "faulty"
    with federation.client() as client:
        request = run_request(spec, len(federation.client_files), str(out), timeout)
        client.create_run(run_id, spec.label, request)
    return run_id


def _wait(federation: LocalFederation, run_id: str, until, limit_s: float = 300):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            with federation.client() as client:
                run = client.get_run(run_id)
            if until(run):
                return run
        except ConnectionError:
            pass  # the coordinator is restarting
        time.sleep(1.0)
    raise AssertionError(f"run {run_id} did not reach the expected state in {limit_s} s")


def test_killed_client_is_skipped_and_rejoins(tmp_path):
    rounds = 4
    config, federation = _federation(tmp_path, clients=4, rounds=rounds)
    out = tmp_path / "out"
    with federation:
        run_id = _start_run(federation, config, out, timeout=30)
        _wait(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        federation.kill("client-3")
        _wait(federation, run_id, lambda r: (r.last_completed_round or -1) >= 1)
        federation.restart("client-3")
        run = _wait(federation, run_id, lambda r: not r.active)
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


@pytest.fixture
def uninterrupted(tmp_path_factory):
    """The same run in the in-process runtime, for comparison."""
    from typer.testing import CliRunner

    from collabfl.coordinator.cli import app

    root = tmp_path_factory.mktemp("reference")
    flags = [
        *BASE,
        "data.num_clients=3",
        "rounds=4",
        f"data.cache_dir={json.dumps(str(root / 'cache'))}",
    ]
    args = [arg for f in flags for arg in ("--set", f)]
    result = CliRunner().invoke(app, ["simulate", *args, "--out", str(root / "run")])
    assert result.exit_code == 0, result.output
    return read_run(root / "run" / "dpfl").rows


def test_coordinator_restart_resumes_the_run_exactly(tmp_path, uninterrupted):
    config, federation = _federation(tmp_path, clients=3, rounds=4)
    out = tmp_path / "out"
    with federation:
        run_id = _start_run(federation, config, out, timeout=120)
        _wait(federation, run_id, lambda r: (r.last_completed_round or -1) >= 1)
        federation.kill("coordinator")
        federation.restart("coordinator")
        run = _wait(federation, run_id, lambda r: not r.active, limit_s=400)
    assert run.status == "finished", run.message
    with CoordinatorState(federation.coordinator_dir / "coordinator.db") as state:
        kinds = [e.kind for e in state.events(run_id)]
    assert "resumed" in kinds
    rows = read_run(out / "dpfl").rows
    assert [(r["round"], r["client"]) for r in rows] == [
        (r["round"], r["client"]) for r in uninterrupted
    ]
    for resumed, reference in zip(rows, uninterrupted, strict=True):
        assert resumed["best_test_acc"] == pytest.approx(reference["best_test_acc"], abs=1e-9)
        assert resumed["num_collaborators"] == reference["num_collaborators"]
