"""CoordinatorState keeps everything in SQLite, survives a reopen and refuses bad records."""

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from collabfl.coordinator.store.database import MIGRATIONS
from collabfl.coordinator.store.state import (
    CoordinatorState,
    InvalidRecord,
    Member,
    RunConflict,
    RunNotActive,
    SchemaMismatch,
    UnknownMember,
    UnknownRound,
    UnknownRun,
)

BIG_NODE_ID = 2**64 - 5  # Flower node ids are uint64; SQLite integers are signed
MEMBERS = [
    Member(0, BIG_NODE_ID, "10.0.0.1:9400", 120),
    Member(1, 7, "10.0.0.2:9400", 80),
    Member(2, 8, "10.0.0.3:9400", 200),
]
EDGES = [(0, 1, 0.5), (1, 0, 0.25), (2, 2, 1.0)]
METRICS = {0: {"test_acc": 0.8, "bytes_fetched": 1024}, 1: {"test_acc": 0.6, "note": None}}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "coordinator.sqlite"


@pytest.fixture
def state(db: Path):
    with CoordinatorState(db) as opened:
        yield opened


def test_everything_survives_a_reopen(db: Path) -> None:
    with CoordinatorState(db) as state:
        state.register_members(MEMBERS)
        state.create_run("run-1", "dpfl", {"budget": 2, "rounds": 10})
        state.record_round("run-1", 0, EDGES, METRICS, num_clients=3)
        state.record_round("run-1", 1, [(0, 2, 0.5)], {2: {"test_acc": 0.9}})
        state.record_event("run-1", "peer_skipped", "digest mismatch", round=1, client_id=2)
        state.request_stop("run-1")

    with CoordinatorState(db) as state:
        assert [(m.client_id, m.flower_node_id, m.peer_address) for m in state.members()] == [
            (m.client_id, m.flower_node_id, m.peer_address) for m in MEMBERS
        ]
        run = state.run("run-1")
        assert (run.method, run.config, run.status) == (
            "dpfl",
            {"budget": 2, "rounds": 10},
            "stopping",
        )
        assert state.last_completed_round("run-1") == 1
        history = state.graph_history("run-1")
        assert [(g.round, g.num_clients, g.edges) for g in history] == [
            (0, 3, sorted(EDGES)),
            (1, 3, [(0, 2, 0.5)]),
        ]
        assert state.metrics("run-1") == {0: METRICS, 1: {2: {"test_acc": 0.9}}}
        [event] = state.events("run-1")
        assert (event.kind, event.round, event.client_id, event.level) == (
            "peer_skipped",
            1,
            2,
            "warning",
        )


def test_database_uses_wal_and_records_its_schema_version(state: CoordinatorState) -> None:
    conn = sqlite3.connect(state.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    finally:
        conn.close()


def test_a_file_from_a_newer_collabfl_is_refused(db: Path) -> None:
    CoordinatorState(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(SchemaMismatch, match="newer collabfl"):
        CoordinatorState(db)


def test_reregistering_a_member_updates_it(state: CoordinatorState) -> None:
    state.register_members(MEMBERS)
    first = state.member(1)
    everyone = state.register_members([Member(1, 70, "10.0.0.9:9400", 81)])
    assert everyone == state.members()
    assert len(everyone) == 3
    updated = state.member(1)
    assert (updated.flower_node_id, updated.peer_address, updated.num_samples) == (
        70,
        "10.0.0.9:9400",
        81,
    )
    assert updated.registered_at == first.registered_at
    with pytest.raises(UnknownMember, match="client 5"):
        state.member(5)


def test_record_round_is_idempotent_and_replaces(state: CoordinatorState) -> None:
    state.create_run("r", "pfedgraph", {})
    state.record_round("r", 0, EDGES, METRICS)
    state.record_round("r", 1, EDGES, METRICS)
    before = state.round("r", 1)
    state.record_round("r", 1, EDGES, METRICS)
    again = state.round("r", 1)
    assert (again.edges, again.metrics, again.num_clients) == (
        before.edges,
        before.metrics,
        before.num_clients,
    )
    # A resumed run may re-send an earlier round with different content: the last one wins.
    state.record_round("r", 0, [(1, 2, 0.75)], {1: {"test_acc": 0.5}})
    assert state.round("r", 0).edges == [(1, 2, 0.75)]
    assert state.round("r", 0).metrics == {1: {"test_acc": 0.5}}
    assert state.last_completed_round("r") == 1
    assert len(state.graph_history("r")) == 2


def test_num_clients_is_inferred_when_not_given(state: CoordinatorState) -> None:
    state.create_run("r", "dpfl", {})
    state.record_round("r", 0, [(0, 3, 0.5)], {5: {"test_acc": 0.1}})
    assert state.round("r", 0).num_clients == 6
    state.record_round("r", 1, [], {})
    assert state.round("r", 1).num_clients == 0


@pytest.mark.parametrize(
    ("edges", "metrics", "num_clients", "message"),
    [
        ([(0, 1, 0.5), (0, 1, 0.2)], {}, 0, "listed twice"),
        ([(0, 1, -0.1)], {}, 0, "finite, >= 0"),
        ([(0, 1, float("nan"))], {}, 0, "finite, >= 0"),
        ([(0, 1, "0.5")], {}, 0, "finite, >= 0"),
        ([(-1, 1, 0.5)], {}, 0, "edge source i must be an integer >= 0"),
        ([(0, 4, 0.5)], {}, 3, "client index 4 outside a graph of 3 clients"),
        ([], {0: [0.5]}, 0, "metrics of client 0 must be a JSON object"),
        ([], {0: {"x": object()}}, 0, "not JSON"),
    ],
)
def test_bad_rounds_are_refused(
    state: CoordinatorState, edges: list, metrics: dict, num_clients: int, message: str
) -> None:
    state.create_run("r", "dpfl", {})
    with pytest.raises(InvalidRecord, match=message):
        state.record_round("r", 0, edges, metrics, num_clients)
    assert state.last_completed_round("r") is None


def test_unknown_run_and_round_have_readable_messages(state: CoordinatorState) -> None:
    with pytest.raises(UnknownRun) as caught:
        state.run("nope")
    assert str(caught.value) == "no run 'nope'"
    with pytest.raises(UnknownRun):
        state.record_round("nope", 0, [], {})
    state.create_run("r", "dpfl", {})
    with pytest.raises(UnknownRound, match="run r has no recorded round 3"):
        state.round("r", 3)


def test_create_run_resumes_or_conflicts(state: CoordinatorState) -> None:
    created = state.create_run("r", "dpfl", {"b": 1, "a": 2})
    state.record_round("r", 4, [], {})
    resumed = state.create_run("r", "dpfl", {"a": 2, "b": 1})
    assert resumed.created_at == created.created_at
    assert resumed.last_completed_round == 4
    with pytest.raises(RunConflict, match="already exists"):
        state.create_run("r", "dpfl", {"a": 3, "b": 1})
    with pytest.raises(RunConflict):
        state.create_run("r", "fedavg", {"a": 2, "b": 1})
    state.finish_run("r", "failed", "client 3 crashed")
    reopened = state.create_run("r", "dpfl", {"a": 2, "b": 1})
    assert (reopened.status, reopened.message) == ("running", "")


@pytest.mark.parametrize("run_id", ["", "has space", "../etc", "x" * 129, "-lead"])
def test_bad_run_ids_are_refused(state: CoordinatorState, run_id: str) -> None:
    with pytest.raises(InvalidRecord, match="run id"):
        state.create_run(run_id, "dpfl", {})


def test_run_lifecycle(state: CoordinatorState) -> None:
    state.create_run("r", "dpfl", {})
    assert state.run("r").active
    assert state.request_stop("r").status == "stopping"
    assert state.request_stop("r").status == "stopping"
    state.record_round("r", 0, [], {})  # the round in flight still lands
    stopped = state.finish_run("r", "stopped", "operator")
    assert (stopped.status, stopped.message, stopped.active) == ("stopped", "operator", False)
    assert state.finish_run("r", "stopped").status == "stopped"  # a retried call succeeds
    with pytest.raises(RunNotActive, match="already ended"):
        state.finish_run("r", "finished")
    with pytest.raises(RunNotActive):
        state.request_stop("r")
    with pytest.raises(RunNotActive, match="rounds refused"):
        state.record_round("r", 1, [], {})
    with pytest.raises(RunNotActive):
        state.active_run("r")
    with pytest.raises(InvalidRecord, match="a run ends as one of"):
        state.finish_run("r", "running")


def test_events_filter_and_federation_wide(state: CoordinatorState) -> None:
    state.create_run("a", "dpfl", {})
    state.create_run("b", "dpfl", {})
    first = state.record_event("a", "client_vanished", level="error", client_id=3)
    state.record_event("b", "fetch_refused", round=2)
    state.record_event("", "member_joined", level="info")
    state.record_event("a", "peer_skipped", round=1)
    assert [e.kind for e in state.events("a")] == ["client_vanished", "peer_skipped"]
    assert [e.kind for e in state.events("a", after_id=first.event_id)] == ["peer_skipped"]
    assert [e.run_id for e in state.events()] == ["a", "b", "", "a"]
    assert len(state.events(limit=2)) == 2
    with pytest.raises(InvalidRecord, match="level"):
        state.record_event("a", "x", level="fatal")
    with pytest.raises(InvalidRecord, match="kind"):
        state.record_event("a", "")
    with pytest.raises(UnknownRun):
        state.record_event("zzz", "x")


def test_concurrent_writers_are_serialised(state: CoordinatorState) -> None:
    state.create_run("r", "dpfl", {})

    def write(worker: int) -> None:
        for k in range(20):
            state.record_event("r", "tick", round=k, client_id=worker)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(state.events("r")) == 120


def test_numpy_values_are_accepted(state: CoordinatorState) -> None:
    """Graphs and metrics come out of numpy code; they need no conversion by the caller."""
    state.create_run("r", "pfedgraph", {})
    edges = [(np.int64(0), np.int32(1), np.float32(0.5))]
    state.record_round("r", np.int64(0), edges, {np.int64(1): {"test_acc": np.float32(0.25)}})
    record = state.round("r", 0)
    assert (record.edges, record.metrics) == ([(0, 1, 0.5)], {1: {"test_acc": 0.25}})


def test_coalitions_round_trip_in_canonical_order(db: Path) -> None:
    """None (no coalition method), [] (none this round) and a partition all read back."""
    with CoordinatorState(db) as state:
        state.create_run("r", "fedcollab", {})
        state.record_round("r", 0, [], METRICS, 4, coalitions=[[3, np.int64(1)], (2, 0)])
        state.record_round("r", 1, EDGES, METRICS, 4)
        state.record_round("r", 2, [], {}, 4, coalitions=[])
    with CoordinatorState(db) as state:
        assert state.coalitions("r") == {0: [[0, 2], [1, 3]], 2: []}
        assert state.round("r", 0).coalitions == [[0, 2], [1, 3]]
        assert state.round("r", 0).metrics == METRICS
        assert state.round("r", 1).coalitions is None
        assert state.round("r", 2).coalitions == []
        assert state.coalitions("r", round=0) == {0: [[0, 2], [1, 3]]}
        assert state.coalitions("r", round=1) == {}
        with pytest.raises(UnknownRound, match="run r has no recorded round 7"):
            state.coalitions("r", round=7)
        with pytest.raises(UnknownRun):
            state.coalitions("nope")


def test_rerecording_coalitions_is_idempotent_and_replaces(state: CoordinatorState) -> None:
    state.create_run("r", "equilibrium", {})
    state.record_round("r", 0, [], METRICS, 3, coalitions=[[0, 1], [2]])
    state.record_round("r", 0, [], METRICS, 3, coalitions=[[0, 1], [2]])
    assert state.coalitions("r") == {0: [[0, 1], [2]]}
    state.record_round("r", 0, [], METRICS, 3, coalitions=[[0, 1, 2]])
    assert state.coalitions("r") == {0: [[0, 1, 2]]}
    state.record_round("r", 0, [], METRICS, 3)  # a re-sent round without coalitions drops them
    assert state.coalitions("r") == {}
    assert state.round("r", 0).coalitions is None
    assert len(state.graph_history("r")) == 1


@pytest.mark.parametrize(
    ("coalitions", "message"),
    [
        ([[0, 1], [1, 2]], "client 1 is in coalitions 0 and 1; coalitions must be disjoint"),
        ([[0, 2, 0]], "client 0 listed twice in coalition 0"),
        ([[0], [1, 5]], "coalition member 5 outside a graph of 3 clients"),
        ([[0], []], "coalition 1 has no members"),
        ([[0, -1]], "coalition 0 member must be an integer >= 0"),
        ([[0, True]], "coalition 0 member must be an integer >= 0"),
        ([[0, 1.0]], "coalition 0 member must be an integer >= 0"),
        ([0, 1], "coalition 0 must be a list of client indices"),
        (["01"], "coalition 0 must be a list of client indices"),
    ],
)
def test_bad_coalitions_are_refused_and_nothing_is_written(
    state: CoordinatorState, coalitions: list, message: str
) -> None:
    state.create_run("r", "fedcollab", {})
    state.record_round("r", 0, [], {0: {"test_acc": 0.5}}, 3, coalitions=[[0], [1, 2]])
    for round_index in (0, 1):  # neither the re-sent round nor a new one is touched
        with pytest.raises(InvalidRecord, match=message):
            state.record_round("r", round_index, [], {0: {"test_acc": 0.9}}, 3, coalitions)
    assert state.last_completed_round("r") == 0
    assert state.round("r", 0).metrics == {0: {"test_acc": 0.5}}
    assert state.coalitions("r") == {0: [[0], [1, 2]]}
    with pytest.raises(UnknownRound):
        state.round("r", 1)
