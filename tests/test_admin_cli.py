"""``collabfl admin`` against a real coordinator service, and against nothing at all."""

import json
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest
from support.coordinator import served, valid_request
from typer.testing import CliRunner, Result

from collabfl.cli import admin
from collabfl.cli.admin import admin_app, tables
from collabfl.coordinator.service import serve
from collabfl.coordinator.service_client import CoordinatorClient
from collabfl.coordinator.store.state import CoordinatorState, Member
from collabfl.engine.recording import ROW_KEYS
from collabfl.engine.report.console import plain_console
from collabfl.kernel import exit_status

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROUNDS = {
    0: [(0, 1, 0.5), (1, 0, 0.25), (2, 3, 1.0)],
    1: [(0, 1, 0.75), (3, 2, 0.5)],
}
METRICS = {
    0: {0: {"test_acc": 0.5, "bytes_fetched": 1024}, 1: {"test_acc": 0.7, "bytes_fetched": 1024}},
    1: {0: {"test_acc": 0.6, "bytes_fetched": 2048}, 1: {"test_acc": 0.9, "bytes_fetched": 0}},
}


LEDGER = {
    0: {"gain": 2.5, "sharing_cost": 0.0, "payment": 1.25, "utility": 1.25, "importers": 0},
    1: {"gain": 0.0, "sharing_cost": 1.0, "payment": -1.25, "utility": 0.25, "importers": 1},
}

COALITIONS = {
    0: [[0, 1], [2, 3, 4]],
    1: [[0, 1], [2, 3, 4]],
    2: [[0], [1, 2, 3, 4, 5]],  # client 1 moves, late joiner 5 is placed into coalition 1
}


class FakeSigner:
    def issue(self, run: str, fetcher: int, owner: int, round: int, ttl_s: float) -> bytes:
        return b"token"


@pytest.fixture
def state(tmp_path: Path) -> Iterator[CoordinatorState]:
    with CoordinatorState(tmp_path / "coordinator.sqlite") as opened:
        yield opened


@pytest.fixture
def address(state: CoordinatorState, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A live coordinator holding members, a run with two rounds, and events."""
    monkeypatch.setattr(tables, "console", plain_console(width=200))  # no wrapped table cells
    state.register_members([Member(c, 1000 + c, f"10.0.0.{c}:9400", 50) for c in range(4)])
    state.create_run("exp-1", "dpfl", {"budget": 1})
    for round_index, edges in ROUNDS.items():
        state.record_round("exp-1", round_index, edges, METRICS[round_index], num_clients=4)
    state.record_event("exp-1", "peer_skipped", "digest mismatch", round=1, client_id=3)
    state.create_run("market", "ipfl", {})
    for round_index in (0, 1):
        state.record_round("market", round_index, [(0, 1, 1.0)], LEDGER, num_clients=2)
    state.create_run("wide", "pfedgraph", {})
    state.record_round("wide", 0, [(i, (i + 1) % 20, 0.5) for i in range(20)], {})
    server, port = serve(state, FakeSigner())
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _admin(address: str, *args: str) -> Result:
    return CliRunner().invoke(admin_app, ["--coordinator", address, *args])


def _ok(address: str, *args: str) -> str:
    result = _admin(address, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_status(address: str) -> None:
    out = _ok(address, "status")
    assert f"coordinator {address}: up" in out
    assert "4 members, 3 runs, 3 active" in out
    assert "exp-1" in out and "wide" in out


def test_address_from_the_environment(address: str) -> None:
    result = CliRunner().invoke(admin_app, ["members"], env={"COLLABFL_COORDINATOR": address})
    assert result.exit_code == 0, result.output
    assert "10.0.0.3:9400" in result.stdout


def test_members_and_runs(address: str) -> None:
    members = _ok(address, "members")
    assert all(f"10.0.0.{c}:9400" in members for c in range(4))
    assert "1003" in members
    runs = _ok(address, "runs")
    assert "exp-1" in runs and "dpfl" in runs and "pfedgraph" in runs


def test_graph_table_and_png(address: str, tmp_path: Path) -> None:
    png = tmp_path / "plots" / "round0.png"
    out = _ok(address, "graph", "exp-1", "0", "--png", str(png))
    assert "run exp-1, round 0: 4 clients, 3 edges" in out
    assert "0.50" in out and "0.25" in out and "1.00" in out
    assert png.read_bytes().startswith(PNG_MAGIC)
    last = _ok(address, "graph", "exp-1")  # default: the last completed round
    assert "round 1: 4 clients, 2 edges" in last and "0.75" in last


def test_large_graph_prints_as_edge_list(address: str) -> None:
    out = _ok(address, "graph", "wide", "0")
    assert "uses peer j" in out
    assert "0.5000" in out


def test_export_json(address: str, tmp_path: Path) -> None:
    out = tmp_path / "history.json"
    _ok(address, "export", "exp-1", "--format", "json", "--out", str(out))
    document = json.loads(out.read_text())
    assert (document["run_id"], document["method"]) == ("exp-1", "dpfl")
    assert [
        (r["round"], r["num_clients"], [tuple(e) for e in r["edges"]]) for r in document["rounds"]
    ] == [(r, 4, sorted(edges)) for r, edges in ROUNDS.items()]


def test_export_graphml(address: str, tmp_path: Path) -> None:
    out = tmp_path / "history.graphml"
    _ok(address, "export", "exp-1", "--format", "graphml", "--out", str(out))
    graph = nx.read_graphml(out, node_type=int, force_multigraph=True)
    assert graph.is_directed()
    assert sorted(graph.nodes) == [0, 1, 2, 3]
    assert graph.graph["run_id"] == "exp-1"
    edges = sorted((d["round"], i, j, d["weight"]) for i, j, d in graph.edges(data=True))
    assert edges == sorted((r, i, j, w) for r, es in ROUNDS.items() for i, j, w in es)


def test_metrics(address: str) -> None:
    out = _ok(address, "metrics", "exp-1")
    assert "60.00%" in out and "50.00%" in out and "70.00%" in out  # round 0 mean/min/max
    assert "75.00%" in out and "90.00%" in out  # round 1
    assert "2.0 KiB" in out


def test_metrics_label_which_model_each_accuracy_is(state: CoordinatorState, address: str) -> None:
    """A "mean acc" of the current model (70.65%) beside a report of the best-validation
    models (96.50%) contradicted it without a word: both are shown, labelled, and the
    output says which one the report uses."""
    state.create_run("labelled", "dpfl", {})
    rows = {c: {"test_acc": acc, "best_test_acc": 0.965} for c, acc in enumerate((0.7, 0.713))}
    state.record_round("labelled", 0, [], rows, num_clients=2)
    out = _ok(address, "metrics", "labelled")
    assert "current model: mean acc" in out and "best-validation model: mean acc" in out
    row = next(line for line in out.splitlines() if line.strip("│ ").startswith("0 "))
    assert "70.65% (70.00%–71.30%)" in row and "96.50%" in row
    assert "the report (summary.json, results.md) uses this one" in " ".join(out.split())


def test_payments_ledger_with_cumulative_totals(address: str) -> None:
    out = _ok(address, "payments", "market")
    assert "round 1" in out
    assert "1.250" in out and "-1.250" in out  # this round's payments
    assert "0.500" in out and "-2.500" in out  # client 1: utility and payment over 2 rounds
    first = _ok(address, "payments", "market", "--round", "0")
    assert "round 0" in first
    refused = _admin(address, "payments", "exp-1")
    assert refused.exit_code == 2 and "no market ledger" in refused.output


def test_payments_of_a_recorded_non_market_run_is_refused_in_one_line(tmp_path: Path) -> None:
    # As a real run records its rows: every metrics.jsonl column, the market's ones None.
    rows = {c: {key: None for key in ROW_KEYS} | {"test_acc": 0.5} for c in range(2)}
    with CoordinatorState(tmp_path / "coordinator.sqlite") as state:
        state.create_run("recorded", "dpfl", {})
        state.record_round("recorded", 0, [(0, 1, 0.5)], rows, num_clients=2)
        server, port = serve(state, FakeSigner())
        try:
            refused = _admin(f"127.0.0.1:{port}", "payments", "recorded")
        finally:
            server.stop(None)
    assert refused.exit_code == 2, refused.output
    assert refused.exception is None or isinstance(refused.exception, SystemExit)
    assert refused.output.strip().count("\n") == 0 and "no market ledger" in refused.output


@pytest.fixture
def collab(address: str, state: CoordinatorState) -> str:
    """A coalition run, recorded as the ServerApp records it: through the service."""
    for earlier in ("exp-1", "market", "wide"):  # one active run at a time
        state.finish_run(earlier, "finished")
    with CoordinatorClient(address) as client:
        client.create_run("collab", "fedcollab", valid_request("fedcollab"))
        client.launch_token = state.new_launch("collab")
        for round_index, coalitions in COALITIONS.items():
            client.record_round("collab", round_index, [], {}, 6, coalitions=coalitions)
        client.record_round("collab", 3, [], {}, 6)  # a round without coalitions
    return address


def test_coalitions_of_the_last_round_with_changes(collab: str) -> None:
    out = _ok(collab, "coalitions", "collab")
    assert "run collab, round 2: 2 coalitions, 6 clients" in out
    assert _table_rows(out) == [["0", "1", "0"], ["1", "5", "1, 2, 3, 4, 5"]]
    assert (
        "changes since round 1: client 1 moved from coalition 0 to coalition 1; "
        "client 5 joined coalition 1"
    ) in out


def _table_rows(out: str) -> list[list[str]]:
    """The body cells of the rich table in ``out``."""
    return [
        [cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "│" in line
    ]


def test_coalitions_of_a_chosen_round(collab: str) -> None:
    unchanged = _ok(collab, "coalitions", "collab", "--round", "1")
    assert "run collab, round 1: 2 coalitions, 5 clients" in unchanged
    assert "changes since round 0: none" in unchanged
    first = _ok(collab, "coalitions", "collab", "--round", "0")
    assert _table_rows(first) == [["0", "2", "0, 1"], ["1", "3", "2, 3, 4"]]
    assert "changes since" not in first


def test_coalitions_as_json(collab: str) -> None:
    document = json.loads(_ok(collab, "coalitions", "collab", "--json"))
    assert document == {
        "run_id": "collab",
        "round": 2,
        "coalitions": COALITIONS[2],
        "previous_round": 1,
        "changes": [{"client": 1, "from": 0, "to": 1}, {"client": 5, "from": None, "to": 1}],
    }
    first = json.loads(_ok(collab, "coalitions", "collab", "--round", "0", "--json"))
    assert (first["previous_round"], first["changes"]) == (None, [])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("exp-1",), "error: run exp-1 has no coalitions (is it a coalition method"),
        (("nope",), "error: no run 'nope'"),
        (("collab", "--round", "7"), "error: run collab has no recorded round 7"),
        (("collab", "--round", "3"), "error: run collab recorded no coalitions in round 3"),
    ],
)
def test_coalitions_refusals_are_one_line(collab: str, args: tuple[str, ...], message: str) -> None:
    result = _admin(collab, "coalitions", *args)
    assert result.exit_code == admin.EXIT_REFUSED
    assert result.stderr.startswith(message)
    assert result.stderr.count("\n") == 1


def test_events(address: str) -> None:
    out = _ok(address, "events", "exp-1")
    assert "peer_skipped" in out and "digest mismatch" in out


def test_events_of_the_whole_federation_by_a_documented_flag(
    address: str, state: CoordinatorState
) -> None:
    state.record_event("", "join_refused", "join from 10.1.2.3 refused", "warning")
    everything = _ok(address, "events", "--all")
    assert "exp-1" in everything and "join_refused" in everything and "peer_skipped" in everything
    assert "join_refused" not in _ok(address, "events", "exp-1")
    for neither_or_both in ((), ("exp-1", "--all")):
        assert _admin(address, "events", *neither_or_both).exit_code == exit_status.USAGE


LONG_HOST = "lab-0.radiology.university-hospital.example.org"
LONG_MESSAGE = (
    "digest mismatch from client 3's model of round 1: expected ab12cd34, got ef56ab78; "
    "the peer is skipped for this round"
)


def test_members_and_events_read_at_80_columns(
    address: str, state: CoordinatorState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns rich folded every cell a few letters a line; a table too wide prints
    its rows as records, so addresses and messages stay whole (issue #42, 7)."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(tables, "console", plain_console())
    state.register_members([Member(7, 10**18 + 7, f"{LONG_HOST}:9200", 50)])
    state.record_event("exp-1", "peer_skipped", LONG_MESSAGE, round=1, client_id=3)
    members = _ok(address, "members").splitlines()
    events = _ok(address, "events", "--all").splitlines()
    assert max(len(line) for line in members + events) <= 80
    assert any(f"{LONG_HOST}:9200" in line for line in members)
    assert any("1000000000000000007" in line for line in members)
    assert LONG_MESSAGE in " ".join(line.strip() for line in events)
    assert any("warning" in line for line in events) and "[yellow]" not in "".join(events)
    assert any("online" in line or "offline" in line for line in members)
    assert "[green]" not in "".join(members) and "[yellow]" not in "".join(members)


def test_stop_then_stop_an_ended_run(address: str) -> None:
    assert "run exp-1: stop requested (status stopping)" in _ok(address, "stop", "exp-1")
    assert "stopping" in _ok(address, "runs")
    unknown = _admin(address, "stop", "nope")
    assert unknown.exit_code == admin.EXIT_REFUSED
    assert unknown.stderr.strip() == "error: no run 'nope'"


def test_unknown_round_is_refused(address: str) -> None:
    result = _admin(address, "graph", "exp-1", "7")
    assert result.exit_code == admin.EXIT_REFUSED
    assert "no recorded round 7" in result.stderr


def test_coalitions_with_a_dead_coordinator_exit_3(closed_port: int) -> None:
    dead = f"127.0.0.1:{closed_port}"
    result = CliRunner().invoke(
        admin_app, ["--coordinator", dead, "--timeout", "2", "coalitions", "r"]
    )
    assert result.exit_code == admin.EXIT_UNREACHABLE
    assert result.stderr.startswith(f"error: cannot reach the coordinator at {dead}")


def test_dead_coordinator_exits_1_with_one_line(closed_port: int) -> None:
    dead = f"127.0.0.1:{closed_port}"
    result = CliRunner().invoke(admin_app, ["--coordinator", dead, "--timeout", "2", "status"])
    assert result.exit_code == admin.EXIT_UNREACHABLE == exit_status.FAILURE
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: cannot reach the coordinator at {dead}")
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


LONG_RUN_ID = "dpfl_budget_0.1-20261126-043000"


def test_run_ids_stay_whole_at_80_columns(
    state: CoordinatorState, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command takes a run id: a table that cuts it (``dpfl_budget…``) is no use."""
    monkeypatch.setattr(tables, "console", plain_console(width=80))
    state.create_run(LONG_RUN_ID, "dpfl:budget=0.1", {})
    state.finish_run(LONG_RUN_ID, "failed", "the ServerApp kept dying")
    for command in ("runs", "status"):
        out = _ok(address, command)
        assert "…" not in out, out
        assert max(len(line) for line in out.splitlines()) <= 80
    runs = _ok(address, "runs")
    assert any(line.strip().startswith(f"{LONG_RUN_ID} ") for line in runs.splitlines()), runs
    assert f"{LONG_RUN_ID}: the ServerApp kept dying" in runs


def test_start_refuses_an_out_folder_holding_a_run(tmp_path: Path) -> None:
    """``admin start --out r1`` over a finished run once overwrote its results and mixed the
    two runs in one folder; now it is refused as ``compare --out`` is, unless --overwrite."""
    runs_dir = tmp_path / "runs"
    earlier = runs_dir / "r1"
    earlier.mkdir(parents=True)
    (earlier / "results.md").write_text("the earlier run\n")
    start = ("start", "--out", "r1", "--run-id", "second")
    with CoordinatorState(tmp_path / "c.db") as state, served(state, runs_dir=runs_dir) as address:
        refused = _admin(address, *start)
        assert refused.exit_code == 2, refused.output
        assert len(refused.stderr.splitlines()) == 1
        assert "holds an earlier run" in refused.stderr and "--overwrite" in refused.stderr
        assert (earlier / "results.md").read_text() == "the earlier run\n"
        assert state.runs() == []

        _ok(address, *start, "--overwrite")
        assert not (earlier / "results.md").exists()
        assert [run.run_id for run in state.runs()] == ["second"]

        # the same run resumed (after a stop) writes on in its own folder: no refusal
        runs_dir.joinpath("r1").mkdir(exist_ok=True)
        (earlier / "serverapp.log").write_text("launch 1\n")
        state.finish_run("second", "stopped")
        _ok(address, *start)
        assert (earlier / "serverapp.log").read_text() == "launch 1\n"
        assert state.run("second").status == "running"


def test_a_participants_escape_sequences_are_shown_not_obeyed(
    address: str, state: CoordinatorState
) -> None:
    # A client's error reply becomes an event's message: a liar can put anything in it.
    state.record_event("exp-1", "client_error", "boom\x1b[2J\x1b]52;c;aGk=\x07", client_id=3)
    out = _ok(address, "events", "exp-1")
    assert "\x1b" not in out and "\x07" not in out
    assert "boom\\x1b[2J\\x1b]52;c;aGk=\\x07" in "".join(line.strip() for line in out.splitlines())
