"""The coordinator service over a real gRPC server and SQLite file, through CoordinatorClient."""

import logging
import sqlite3
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
from support.coordinator import FakeSigner, valid_request
from support.pki import TestCA

from collabfl.apps.run_ledger import ServiceLedger
from collabfl.coordinator import daemon
from collabfl.coordinator.service import serve
from collabfl.coordinator.service_client import (
    CoordinatorClient,
    CoordinatorError,
    CoordinatorUnreachable,
)
from collabfl.coordinator.service_codec import run_to_pb
from collabfl.coordinator.store.state import CoordinatorState, Member, Run
from collabfl.kernel.tls import ClientTLS, ServerTLS
from collabfl.proto import coordinator_pb2 as pb
from collabfl.proto import coordinator_pb2_grpc as pb_grpc

MEMBERS = [Member(c, 2**63 + c, f"127.0.0.1:{9400 + c}", 100 + c) for c in range(4)]
DPFL = valid_request("dpfl", "dpfl.budget=2")
FEDCOLLAB = valid_request("fedcollab")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "coordinator.sqlite"


@pytest.fixture
def state(db: Path) -> Iterator[CoordinatorState]:
    with CoordinatorState(db) as opened:
        yield opened


@pytest.fixture
def client(state: CoordinatorState) -> Iterator[CoordinatorClient]:
    server, port = serve(state, FakeSigner())
    try:
        with CoordinatorClient(f"127.0.0.1:{port}") as connected:
            yield connected
    finally:
        server.stop(None)


@pytest.fixture
def launch(client: CoordinatorClient, state: CoordinatorState):
    """Launch a run as the daemon does: ``client`` then writes as its ServerApp."""

    def launched(run_id: str) -> None:
        client.launch_token = state.new_launch(run_id)

    return launched


def test_members_round_trip(client: CoordinatorClient) -> None:
    registered = client.register_members(MEMBERS)
    assert [(m.client_id, m.flower_node_id, m.peer_address, m.num_samples) for m in registered] == [
        (m.client_id, m.flower_node_id, m.peer_address, m.num_samples) for m in MEMBERS
    ]
    assert client.list_members() == registered
    assert all(m.registered_at > 0 for m in registered)


def test_runs_rounds_and_history(client: CoordinatorClient, launch) -> None:
    run = client.create_run("exp-1", "dpfl", DPFL)
    assert (run.status, run.last_completed_round, run.config) == ("running", None, DPFL)
    launch("exp-1")
    edges = [(0, 1, 0.5), (1, 0, 0.25)]
    metrics = {0: {"test_acc": 0.75, "bytes_fetched": 4096}, 1: {"test_acc": 0.5}}
    numpy_metrics = {
        0: {"test_acc": np.float32(0.75), "bytes_fetched": np.int64(4096)},
        1: {"test_acc": 0.5},
    }
    after = client.record_round("exp-1", 0, edges, numpy_metrics, num_clients=4)
    assert after.last_completed_round == 0
    client.record_round("exp-1", 1, [(2, 3, 1.0)], {2: {"test_acc": 0.9}})
    client.record_round("exp-1", 1, [(2, 3, 1.0)], {2: {"test_acc": 0.9}})  # re-sent

    record = client.get_round("exp-1", 0)
    assert (record.num_clients, record.edges, record.metrics) == (4, edges, metrics)
    assert [(g.round, g.num_clients, g.edges) for g in client.get_graph_history("exp-1")] == [
        (0, 4, edges),
        (1, 4, [(2, 3, 1.0)]),
    ]
    assert client.get_metrics("exp-1") == {0: metrics, 1: {2: {"test_acc": 0.9}}}
    assert client.get_run("exp-1").last_completed_round == 1
    assert [r.run_id for r in client.list_runs()] == ["exp-1"]
    resumed = client.create_run("exp-1", "dpfl", DPFL)
    assert resumed.last_completed_round == 1


def _pages(db: Path) -> int:
    """Pages the database file holds, free ones included (its WAL's too)."""
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA page_count").fetchone()[0]


def test_a_long_run_keeps_a_window_of_rounds_and_its_database_stops_growing(
    client: CoordinatorClient, launch, db: Path
) -> None:
    """Issue #32's soak: coordinator.db grew with every round (4 clients' metrics, graph,
    events). A run's records keep the rounds its run folder keeps graphs of (``retention``):
    the last ``graphs_keep_last`` and every ``graphs_keep_every``-th before; SQLite reuses
    the pages freed, so once the window is full the file stops growing."""
    asked = ("retention.graphs_keep_last=10", "retention.graphs_keep_every=25")
    client.create_run("long", "dpfl", valid_request("dpfl", *asked))
    launch("long")
    metrics = {c: {"test_acc": 0.5 + c / 10, "note": "x" * 800} for c in range(4)}
    pages = {}
    for r in range(90):
        client.record_round("long", r, [(0, 1, 0.5), (1, 0, 0.5)], metrics, num_clients=4)
        client.record_event("long", "no_reply", "no valid reply in time", round=r, client_id=3)
        pages[r] = _pages(db)
    kept = [0, 25, 50, 75, *range(80, 90)]
    assert [g.round for g in client.get_graph_history("long")] == kept
    assert list(client.get_metrics("long")) == kept
    assert [e.round for e in client.list_events("long")] == kept
    assert client.get_run("long").last_completed_round == 89
    with pytest.raises(CoordinatorError, match=r"no longer keeps round 30.*metrics\.jsonl"):
        client.get_round("long", 30)
    with pytest.raises(CoordinatorError, match="has no recorded round 90"):
        client.get_round("long", 90)
    assert pages[89] - pages[30] <= 4  # the kept multiples of 25: a page each at most


def test_ended_runs_beyond_the_latest_few_keep_only_their_run_row(db: Path) -> None:
    """A coordinator that runs many runs: the rounds and events of the runs that ended
    before the ``keep_ended_runs`` latest are dropped (their run folders hold them); the run
    row stays, and a run that is still running keeps everything however old."""
    with CoordinatorState(db, keep_ended_runs=2) as state:
        server, port = serve(state, FakeSigner())
        try:
            with CoordinatorClient(f"127.0.0.1:{port}") as client:
                for run_id in ("old", "middle", "new", "open"):
                    client.create_run(run_id, "dpfl", DPFL)
                    client.launch_token = state.new_launch(run_id)
                    for r in range(3):
                        client.record_round(run_id, r, [(0, 1, 0.5)], {0: {"test_acc": 0.5}})
                    client.record_event(run_id, "no_reply", "no valid reply", round=2)
                    if run_id != "open":
                        client.finish_run(run_id, "finished")
                assert client.get_graph_history("old") == []
                assert client.get_metrics("old") == {} and client.list_events("old") == []
                old = client.get_run("old")
                assert (old.status, old.last_completed_round) == ("finished", 2)
                kept = ("middle", "new", "open")
                assert [len(client.get_graph_history(r)) for r in kept] == [3, 3, 3]
                client.finish_run("open", "stopped")
                assert client.get_graph_history("middle") == []  # "open" ended after it
                assert [len(client.list_events(r)) for r in kept] == [0, 1, 1]
        finally:
            server.stop(None)


def test_a_negative_keep_ended_runs_is_refused_before_anything_runs(tmp_path, capsys) -> None:
    flags = ["--state-dir", str(tmp_path), "--insecure", "--keep-ended-runs", "-1"]
    assert daemon.main(flags) == 2
    assert "--keep-ended-runs (-1) must be at least 0" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_coalitions_round_trip(client: CoordinatorClient, launch) -> None:
    client.create_run("collab", "fedcollab", FEDCOLLAB)
    launch("collab")
    first = [[np.int64(2), 3], [1, 0]]
    client.record_round("collab", 0, [], {0: {"test_acc": 0.5}}, 4, coalitions=first)
    client.record_round("collab", 1, [(0, 1, 1.0)], {}, 4)
    client.record_round("collab", 2, [], {}, 4, coalitions=[[0, 1, 2, 3]])
    client.record_round("collab", 2, [], {}, 4, coalitions=[[0, 1, 2, 3]])  # re-sent
    client.record_round("collab", 3, [], {}, 4, coalitions=[])

    assert client.get_coalitions("collab") == {
        0: [[0, 1], [2, 3]],
        2: [[0, 1, 2, 3]],
        3: [],
    }
    assert client.get_coalitions("collab", round=2) == {2: [[0, 1, 2, 3]]}
    assert client.get_coalitions("collab", round=1) == {}
    assert client.get_round("collab", 0).coalitions == [[0, 1], [2, 3]]
    assert client.get_round("collab", 1).coalitions is None  # none differs from empty
    assert client.get_round("collab", 3).coalitions == []
    assert client.get_run("collab").last_completed_round == 3


@pytest.mark.parametrize(
    ("coalitions", "details"),
    [
        ([[0, 1], [1, 2]], "client 1 is in coalitions 0 and 1; coalitions must be disjoint"),
        ([[0], [4]], "coalition member 4 outside a graph of 4 clients"),
        ([[0], []], "coalition 1 has no members"),
        ([[-2]], "coalition 0 member must be an integer >= 0"),
    ],
)
def test_bad_coalitions_are_invalid_arguments(
    client: CoordinatorClient, launch, coalitions: list, details: str
) -> None:
    client.create_run("collab", "fedcollab", FEDCOLLAB)
    launch("collab")
    with pytest.raises(CoordinatorError, match=details) as caught:
        client.record_round("collab", 0, [], {0: {"test_acc": 0.5}}, 4, coalitions=coalitions)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert client.get_run("collab").last_completed_round is None
    with pytest.raises(CoordinatorError, match="no recorded round 0"):
        client.get_round("collab", 0)


def test_coalitions_of_unknown_runs_and_rounds_are_not_found(client: CoordinatorClient) -> None:
    client.create_run("collab", "fedcollab", FEDCOLLAB)
    for call, details in [
        (lambda: client.get_coalitions("missing"), "no run 'missing'"),
        (lambda: client.get_coalitions("collab", round=5), "run collab has no recorded round 5"),
    ]:
        with pytest.raises(CoordinatorError, match=details) as caught:
            call()
        assert caught.value.code == grpc.StatusCode.NOT_FOUND
    assert client.get_coalitions("collab") == {}


def test_stop_is_seen_by_the_round_reply_then_finish(client: CoordinatorClient, launch) -> None:
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    assert client.stop_run("r").status == "stopping"
    assert client.record_round("r", 0, [], {}).status == "stopping"
    finished = client.finish_run("r", "stopped", "operator asked")
    assert (finished.status, finished.message) == ("stopped", "operator asked")


def test_events(client: CoordinatorClient, launch) -> None:
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    vanished = client.record_event("r", "client_vanished", "no reply", level="error", client_id=3)
    skipped = client.record_event("r", "peer_skipped", "bad digest", round=2, client_id=1)
    assert (vanished.round, vanished.client_id, vanished.level) == (None, 3, "error")
    assert client.list_events("r") == [vanished, skipped]
    assert client.list_events("r", after_id=vanished.event_id) == [skipped]


def test_grants(client: CoordinatorClient, launch) -> None:
    client.register_members(MEMBERS)
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    for done in range(3):  # grants are for the round in progress: 3
        client.record_round("r", done, [], {})
    tokens = client.issue_grants("r", round=3, fetches={0: [2, 1], 2: [0]}, ttl_s=30)
    assert tokens == {0: {2: b"r:0->2@3/30", 1: b"r:0->1@3/30"}, 2: {0: b"r:2->0@3/30"}}
    assert client.issue_grants("r", 3, {0: []}, 30) == {0: {}}
    assert client.issue_grants("r", 3, {}, 30) == {}


@pytest.mark.parametrize(
    ("args", "code", "details"),
    [
        (("nope", 0, {0: [1]}, 30.0), grpc.StatusCode.NOT_FOUND, "no run 'nope'"),
        (("r", 0, {0: [9]}, 30.0), grpc.StatusCode.NOT_FOUND, "client 9 is not a registered"),
        (("r", 0, {0: [0, 1]}, 30.0), grpc.StatusCode.INVALID_ARGUMENT, "its own model"),
        (("r", 0, {0: [1, 1]}, 30.0), grpc.StatusCode.INVALID_ARGUMENT, "twice"),
        (("r", 0, {0: [1]}, 0.0), grpc.StatusCode.INVALID_ARGUMENT, "ttl_s"),
        (("r", 0, {0: [1]}, 1e6), grpc.StatusCode.INVALID_ARGUMENT, "ttl_s"),
        (("r", -1, {0: [1]}, 30.0), grpc.StatusCode.INVALID_ARGUMENT, "round"),
        (("ended", 0, {0: [1]}, 30.0), grpc.StatusCode.FAILED_PRECONDITION, "has ended"),
        # one bad fetch refuses the whole round's call, whichever place it has in it
        (("r", 0, {0: [1], 1: [1]}, 30.0), grpc.StatusCode.INVALID_ARGUMENT, "its own model"),
        (("r", 0, {0: [1], 1: [9]}, 30.0), grpc.StatusCode.NOT_FOUND, "client 9 is not"),
    ],
)
def test_grant_refusals(
    client: CoordinatorClient, launch, args: tuple, code: grpc.StatusCode, details: str
) -> None:
    client.register_members(MEMBERS)
    client.create_run("ended", "dpfl", DPFL)
    launch("ended")
    client.finish_run("ended")
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    with pytest.raises(CoordinatorError, match=details) as caught:
        client.issue_grants(*args)
    assert caught.value.code == code


def test_a_fetcher_named_twice_in_one_round_is_refused(client: CoordinatorClient, launch) -> None:
    """The wire allows a fetcher twice in one request (the client's mapping does not)."""
    client.register_members(MEMBERS)
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    fetch = pb.Fetch(fetcher=0, owners=[1])
    request = pb.IssueGrantsRequest(
        run_id="r", round=0, fetches=[fetch, fetch], ttl_s=30, launch_token=client.launch_token
    )
    with pytest.raises(grpc.RpcError) as caught:
        client._stub.IssueGrants(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "fetchers [0, 0] lists a client twice" in caught.value.details()


def test_a_service_ledger_is_the_serverapps_run_at_the_coordinator(
    client: CoordinatorClient, launch
) -> None:
    """The ServerApp's RunLedger (apps/run_ledger.py) over this service: its writes name
    its run, a round's grants come back per fetcher, and a stop shows in the answer to the
    next round's record as in ``stop_requested``."""
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    ledger = ServiceLedger(client, "r", grant_ttl_s=30)
    ledger.register_members(MEMBERS)
    ledger.say("4 clients joined")
    ledger.record_event("anomaly", "reported 9000 samples", client_id=1)
    assert client.get_run("r").message == "4 clients joined"
    [event] = client.list_events("r")
    assert (event.kind, event.level, event.client_id) == ("anomaly", "warning", 1)
    assert ledger.last_completed_round() is None
    grants = ledger.issue_grants(0, {0: [1], 1: [0, 2]})
    assert grants == {0: {1: b"r:0->1@0/30"}, 1: {0: b"r:1->0@0/30", 2: b"r:1->2@0/30"}}
    assert ledger.record_round(0, [], {}, 4, None) is False
    assert ledger.last_completed_round() == 0 and ledger.stop_requested() is False
    client.stop_run("r")
    assert ledger.stop_requested() is True
    assert ledger.record_round(1, [], {}, 4, None) is True


def test_error_codes(client: CoordinatorClient, launch) -> None:
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    cases = [
        (lambda: client.get_run("missing"), grpc.StatusCode.NOT_FOUND, "no run 'missing'"),
        (lambda: client.get_round("r", 5), grpc.StatusCode.NOT_FOUND, "no recorded round 5"),
        (
            lambda: client.create_run("r", "dpfl", {**DPFL, "expected_clients": 2}),
            grpc.StatusCode.ALREADY_EXISTS,
            "exists",
        ),
        (
            lambda: client.create_run("bad id", "dpfl", DPFL),
            grpc.StatusCode.INVALID_ARGUMENT,
            "id",
        ),
        (
            lambda: client.record_round("r", 0, [(0, 1, -1.0)], {}),
            grpc.StatusCode.INVALID_ARGUMENT,
            "weight",
        ),
        (lambda: client.record_event("r", ""), grpc.StatusCode.INVALID_ARGUMENT, "kind"),
    ]
    for call, code, details in cases:
        with pytest.raises(CoordinatorError, match=details) as caught:
            call()
        assert caught.value.code == code
    client.finish_run("r", "finished")
    with pytest.raises(CoordinatorError) as caught:
        client.stop_run("r")
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_malformed_json_and_enums_are_invalid_arguments(client: CoordinatorClient) -> None:
    """What a non-Python caller could send: the service checks it, not only our client."""
    channel = grpc.insecure_channel(client.address)
    stub = pb_grpc.CoordinatorStub(channel)
    client.create_run("r", "dpfl", DPFL)
    bad_requests = [
        (stub.CreateRun, pb.CreateRunRequest(run_id="x", method="m", config_json="[1]")),
        (stub.CreateRun, pb.CreateRunRequest(run_id="x", method="m", config_json="{oops")),
        (stub.RecordRound, pb.RoundRecord(run_id="r", round=0, metrics_json={0: "nan-json"})),
        (
            stub.RecordRound,
            pb.RoundRecord(run_id="r", round=0, coalitions=[pb.Coalition(members=[0])]),
        ),
        (stub.FinishRun, pb.FinishRunRequest(run_id="r")),
        (stub.RecordEvent, pb.Event(run_id="r", kind="k")),
    ]
    for rpc, request in bad_requests:
        with pytest.raises(grpc.RpcError) as caught:
            rpc(request, timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
    channel.close()


def test_status(client: CoordinatorClient, launch, db: Path) -> None:
    client.register_members(MEMBERS)
    client.create_run("b", "fedavg", valid_request("fedavg"))
    launch("b")
    client.finish_run("b")
    client.create_run("a", "dpfl", DPFL)
    launch("a")
    client.record_round("a", 0, [], {})
    status = client.status()
    assert status.uptime_s >= 0
    assert status.db_path == str(db)
    assert (status.num_members, status.num_runs) == (4, 2)
    assert [(r.run_id, r.last_completed_round) for r in status.active_runs] == [("a", 0)]


def test_restarted_coordinator_resumes(db: Path) -> None:
    nine_rounds = valid_request("dpfl", "rounds=9")
    with CoordinatorState(db) as state:
        server, port = serve(state, FakeSigner())
        with CoordinatorClient(f"127.0.0.1:{port}") as client:
            client.register_members(MEMBERS)
            client.create_run("r", "dpfl", nine_rounds)
            client.launch_token = state.new_launch("r")
            for round_index in range(3):
                client.record_round("r", round_index, [(0, 1, 0.5)], {0: {"test_acc": 0.5}})
        server.stop(None)

    with CoordinatorState(db) as state:
        server, port = serve(state, FakeSigner())
        try:
            with CoordinatorClient(f"127.0.0.1:{port}") as client:
                run = client.create_run("r", "dpfl", nine_rounds)
                assert (run.status, run.last_completed_round) == ("running", 2)
                assert len(client.list_members()) == 4
                assert len(client.get_graph_history("r")) == 3
        finally:
            server.stop(None)


def test_unreachable_coordinator_is_one_clear_error(closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    with (
        CoordinatorClient(address, timeout_s=2) as client,
        pytest.raises(CoordinatorUnreachable) as caught,
    ):
        client.status()
    message = str(caught.value)
    assert f"cannot reach the coordinator at {address}" in message
    assert "collabfl-coordinator is running" in message


class _SlowCreateRun(pb_grpc.CoordinatorServicer):
    """A coordinator whose CreateRun takes a while (its first loads the method code), and
    whose other calls would time out the same way."""

    def CreateRun(self, request: pb.CreateRunRequest, context: grpc.ServicerContext) -> pb.Run:
        time.sleep(0.6)
        return _run_reply(request.run_id)

    def GetRun(self, request: pb.RunRef, context: grpc.ServicerContext) -> pb.Run:
        time.sleep(0.6)
        return _run_reply(request.run_id)


def _run_reply(run_id: str) -> pb.Run:
    return run_to_pb(Run(run_id, "dpfl", {}, "running", None, 0.0, 0.0, ""))


def test_create_run_waits_longer_than_the_other_calls() -> None:
    """A slow CreateRun is waited for past the client's usual deadline: giving up on it would
    report a run as failed that the coordinator goes on to create."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_CoordinatorServicer_to_server(_SlowCreateRun(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with CoordinatorClient(f"127.0.0.1:{port}", timeout_s=0.2) as client:
            assert client.create_run("r", "dpfl", {}).run_id == "r"
            with pytest.raises(CoordinatorUnreachable, match=r"did not answer within 0\.2 s"):
                client.get_run("r")
    finally:
        server.stop(None)


def test_tls(db: Path, tmp_path: Path) -> None:
    ca = TestCA()
    coordinator, operator = ca.coordinator(), ca.operator()
    with CoordinatorState(db) as state:
        tls = ServerTLS(coordinator.cert, coordinator.key, client_ca=ca.cert_pem)
        server, port = serve(state, FakeSigner(), tls=tls)
        try:
            address = f"127.0.0.1:{port}"
            mutual = ClientTLS(ca.cert_pem, operator.cert, operator.key)
            with CoordinatorClient(address, tls=mutual) as client:
                assert client.status().num_runs == 0
            with (
                CoordinatorClient(address, timeout_s=2) as plain,
                pytest.raises(CoordinatorUnreachable, match="agree on TLS"),
            ):
                plain.status()
        finally:
            server.stop(None)


def test_the_serverapps_log_shows_a_participants_escape_sequences_written_out(
    client: CoordinatorClient, launch, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator reading the ServerApp's log in a terminal sees a client's error reply;
    the event itself keeps the words as sent."""
    client.create_run("r", "dpfl", DPFL)
    launch("r")
    ledger = ServiceLedger(client, "r", grant_ttl_s=30)
    with caplog.at_level(logging.WARNING, logger="collabfl.apps.run_ledger"):
        ledger.record_event("client_error", "boom\x1b[2J", client_id=1)
    assert "client_error: boom\\x1b[2J" in caplog.text and "\x1b" not in caplog.text
    [event] = client.list_events("r")
    assert event.message == "boom\x1b[2J"
