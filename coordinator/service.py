"""The coordinator's gRPC service over CoordinatorState, and a typed client for it.

The ServerApp and the admin CLI both talk to a coordinator only through
``CoordinatorClient``, which hands back the plain dataclasses of ``state`` and turns gRPC
failures into two exceptions: ``CoordinatorUnreachable`` (nothing answered: check the
address, the daemon, TLS) and ``CoordinatorError`` (it answered no, with a reason).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc

from collabfl.coordinator.state import (
    Coalitions,
    CoordinatorState,
    Edge,
    Event,
    InvalidRecord,
    Member,
    NotFound,
    RoundGraph,
    RoundRecord,
    Run,
    RunConflict,
    RunNotActive,
    json_scalar,
)
from collabfl.kernel.tls import ClientTLS, ServerTLS
from collabfl.proto import coordinator_pb2 as pb
from collabfl.proto import coordinator_pb2_grpc as pb_grpc

MAX_GRANT_TTL_S = 3600.0
"""Grants are for one round's fetches; anything longer is more likely a unit mistake."""

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Room for a long run's dense graph history (gRPC's default is 4 MiB)."""

_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]

_RUN_STATUS = {
    "running": pb.RUN_STATUS_RUNNING,
    "stopping": pb.RUN_STATUS_STOPPING,
    "stopped": pb.RUN_STATUS_STOPPED,
    "finished": pb.RUN_STATUS_FINISHED,
    "failed": pb.RUN_STATUS_FAILED,
}
_EVENT_LEVEL = {
    "info": pb.EVENT_LEVEL_INFO,
    "warning": pb.EVENT_LEVEL_WARNING,
    "error": pb.EVENT_LEVEL_ERROR,
}

# Most specific first: RunConflict and RunNotActive are ValueErrors too.
_STATUS_CODES: list[tuple[type[Exception], grpc.StatusCode]] = [
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (RunConflict, grpc.StatusCode.ALREADY_EXISTS),
    (RunNotActive, grpc.StatusCode.FAILED_PRECONDITION),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
]

_Reply = TypeVar("_Reply")


class GrantIssuer(Protocol):
    """Signs fetch grants (``collabfl.kernel.grants.GrantSigner`` in a real coordinator)."""

    def issue(self, run: str, fetcher: int, owner: int, round: int, ttl_s: float) -> bytes: ...


@dataclass(frozen=True)
class CoordinatorStatus:
    uptime_s: float
    db_path: str
    num_members: int
    num_runs: int
    active_runs: list[Run]


class CoordinatorUnreachable(ConnectionError):
    """No coordinator answered at the address (not running, wrong address, TLS mismatch)."""


class CoordinatorError(RuntimeError):
    """The coordinator answered with an error; ``code`` says which kind."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


def _rpc(method: Callable[[Any, Any, grpc.ServicerContext], _Reply]) -> Callable[..., _Reply]:
    """Turn state errors into gRPC status codes whose details are the readable message."""

    @functools.wraps(method)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> _Reply:
        try:
            return method(self, request, context)
        except Exception as error:
            for kind, code in _STATUS_CODES:
                if isinstance(error, kind):
                    context.abort(code, str(error))
            raise

    return handler


class CoordinatorService(pb_grpc.CoordinatorServicer):
    """The Coordinator RPCs: decode the request, ask the state, encode the reply."""

    def __init__(self, state: CoordinatorState, signer: GrantIssuer) -> None:
        self._state = state
        self._signer = signer
        self._started = time.monotonic()

    @_rpc
    def RegisterMembers(self, request: pb.RegisterMembersRequest, context: Any) -> pb.MemberList:
        members = self._state.register_members(_member(m) for m in request.members)
        return pb.MemberList(members=[_member_pb(m) for m in members])

    @_rpc
    def ListMembers(self, request: pb.ListMembersRequest, context: Any) -> pb.MemberList:
        return pb.MemberList(members=[_member_pb(m) for m in self._state.members()])

    @_rpc
    def CreateRun(self, request: pb.CreateRunRequest, context: Any) -> pb.Run:
        config = _json_object(request.config_json or "{}", "config_json")
        return _run_pb(self._state.create_run(request.run_id, request.method, config))

    @_rpc
    def GetRun(self, request: pb.RunRef, context: Any) -> pb.Run:
        return _run_pb(self._state.run(request.run_id))

    @_rpc
    def ListRuns(self, request: pb.ListRunsRequest, context: Any) -> pb.RunList:
        return pb.RunList(runs=[_run_pb(run) for run in self._state.runs()])

    @_rpc
    def StopRun(self, request: pb.RunRef, context: Any) -> pb.Run:
        return _run_pb(self._state.request_stop(request.run_id))

    @_rpc
    def FinishRun(self, request: pb.FinishRunRequest, context: Any) -> pb.Run:
        status = _name_of(_RUN_STATUS, request.status, "run status")
        return _run_pb(self._state.finish_run(request.run_id, status, request.message))

    @_rpc
    def RecordRound(self, request: pb.RoundRecord, context: Any) -> pb.Run:
        metrics = {
            client: _json_object(text, f"metrics of client {client}")
            for client, text in request.metrics_json.items()
        }
        if request.coalitions and not request.has_coalitions:
            raise InvalidRecord("coalitions sent without has_coalitions set")
        run = self._state.record_round(
            request.run_id,
            request.round,
            _edges(request.edges),
            metrics,
            request.num_clients,
            _coalitions(request.coalitions) if request.has_coalitions else None,
        )
        return _run_pb(run)

    @_rpc
    def RecordEvent(self, request: pb.Event, context: Any) -> pb.Event:
        event = self._state.record_event(
            request.run_id,
            request.kind,
            request.message,
            _name_of(_EVENT_LEVEL, request.level, "event level"),
            request.round if request.HasField("round") else None,
            request.client_id if request.HasField("client_id") else None,
        )
        return _event_pb(event)

    @_rpc
    def ListEvents(self, request: pb.ListEventsRequest, context: Any) -> pb.EventList:
        events = self._state.events(request.run_id, request.after_id, request.limit)
        return pb.EventList(events=[_event_pb(e) for e in events])

    @_rpc
    def IssueGrants(self, request: pb.IssueGrantsRequest, context: Any) -> pb.GrantList:
        """Grants only for an active run, between registered members, for a sane TTL."""
        run = self._state.active_run(request.run_id)
        if not 0 < request.ttl_s <= MAX_GRANT_TTL_S:
            raise InvalidRecord(f"ttl_s must be in (0, {MAX_GRANT_TTL_S:g}], got {request.ttl_s}")
        if request.round < 0:
            raise InvalidRecord(f"round must be >= 0, got {request.round}")
        owners = list(request.owners)
        if len(set(owners)) != len(owners):
            raise InvalidRecord(f"owners {owners} lists a client twice")
        if request.fetcher in owners:
            raise InvalidRecord(f"client {request.fetcher} needs no grant for its own model")
        for client in (request.fetcher, *owners):
            self._state.member(client)
        grants = [
            pb.Grant(
                owner=owner,
                token=self._signer.issue(
                    run.run_id, request.fetcher, owner, request.round, request.ttl_s
                ),
            )
            for owner in owners
        ]
        return pb.GrantList(grants=grants)

    @_rpc
    def GetRound(self, request: pb.RoundRef, context: Any) -> pb.RoundRecord:
        record = self._state.round(request.run_id, request.round)
        return pb.RoundRecord(
            run_id=record.run_id,
            round=record.round,
            num_clients=record.num_clients,
            edges=_edges_pb(record.edges),
            metrics_json=_metrics_pb(record.metrics),
            recorded_at=record.recorded_at,
            **_coalitions_fields(record.coalitions),
        )

    @_rpc
    def GetGraphHistory(self, request: pb.RunRef, context: Any) -> pb.GraphHistory:
        rounds = [
            pb.RoundGraph(round=g.round, num_clients=g.num_clients, edges=_edges_pb(g.edges))
            for g in self._state.graph_history(request.run_id)
        ]
        return pb.GraphHistory(run_id=request.run_id, rounds=rounds)

    @_rpc
    def GetMetrics(self, request: pb.RunRef, context: Any) -> pb.MetricsHistory:
        rounds = [
            pb.RoundMetrics(round=r, metrics_json=_metrics_pb(by_client))
            for r, by_client in self._state.metrics(request.run_id).items()
        ]
        return pb.MetricsHistory(run_id=request.run_id, rounds=rounds)

    @_rpc
    def GetCoalitions(self, request: pb.CoalitionsRequest, context: Any) -> pb.CoalitionHistory:
        round = request.round if request.HasField("round") else None
        rounds = [
            pb.RoundCoalitions(round=r, coalitions=_coalitions_pb(coalitions))
            for r, coalitions in self._state.coalitions(request.run_id, round).items()
        ]
        return pb.CoalitionHistory(run_id=request.run_id, rounds=rounds)

    @_rpc
    def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusReply:
        runs = self._state.runs()
        return pb.StatusReply(
            uptime_s=time.monotonic() - self._started,
            db_path=str(self._state.path),
            num_members=len(self._state.members()),
            num_runs=len(runs),
            active_runs=[_run_pb(run) for run in runs if run.active],
        )


def serve(
    state: CoordinatorState,
    signer: GrantIssuer,
    address: str = "127.0.0.1:0",
    tls: ServerTLS | None = None,
    max_workers: int = 8,
) -> tuple[grpc.Server, int]:
    """Start the service on ``address`` (port 0: any free port); return it and its port."""
    server = grpc.server(ThreadPoolExecutor(max_workers=max_workers), options=_CHANNEL_OPTIONS)
    pb_grpc.add_CoordinatorServicer_to_server(CoordinatorService(state, signer), server)
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, tls.credentials())
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address}: is the port in use or the host not local?")
    server.start()
    return server, port


class CoordinatorClient:
    """One method per RPC, returning ``state`` dataclasses; usable as a context manager."""

    def __init__(self, address: str, timeout_s: float = 5.0, tls: ClientTLS | None = None) -> None:
        self.address = address
        self.timeout_s = timeout_s
        if tls is None:
            self._channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.secure_channel(address, tls.credentials(), _CHANNEL_OPTIONS)
        self._stub = pb_grpc.CoordinatorStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, rpc: Callable[..., _Reply], request: Any) -> _Reply:
        try:
            return rpc(request, timeout=self.timeout_s)
        except grpc.RpcError as error:
            raise self._translate(error) from None

    def _translate(self, error: grpc.RpcError) -> Exception:
        code: grpc.StatusCode = error.code()  # type: ignore[attr-defined]
        details: str = error.details() or code.name  # type: ignore[attr-defined]
        if code == grpc.StatusCode.UNAVAILABLE:
            reason = f"cannot reach the coordinator at {self.address} ({details})"
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            reason = f"the coordinator at {self.address} did not answer within {self.timeout_s:g} s"
        else:
            return CoordinatorError(code, details)
        return CoordinatorUnreachable(
            f"{reason}; check that collabfl-coordinator is running there, the host and port "
            "(--coordinator or COLLABFL_COORDINATOR), and that both sides agree on TLS"
        )

    def register_members(self, members: Iterable[Member]) -> list[Member]:
        request = pb.RegisterMembersRequest(members=[_member_pb(m) for m in members])
        return [_member(m) for m in self._call(self._stub.RegisterMembers, request).members]

    def list_members(self) -> list[Member]:
        reply = self._call(self._stub.ListMembers, pb.ListMembersRequest())
        return [_member(m) for m in reply.members]

    def create_run(self, run_id: str, method: str, config: Mapping[str, Any]) -> Run:
        request = pb.CreateRunRequest(run_id=run_id, method=method, config_json=json.dumps(config))
        return _run(self._call(self._stub.CreateRun, request))

    def get_run(self, run_id: str) -> Run:
        return _run(self._call(self._stub.GetRun, pb.RunRef(run_id=run_id)))

    def list_runs(self) -> list[Run]:
        return [_run(r) for r in self._call(self._stub.ListRuns, pb.ListRunsRequest()).runs]

    def stop_run(self, run_id: str) -> Run:
        return _run(self._call(self._stub.StopRun, pb.RunRef(run_id=run_id)))

    def finish_run(self, run_id: str, status: str = "finished", message: str = "") -> Run:
        request = pb.FinishRunRequest(
            run_id=run_id, status=_value_of(_RUN_STATUS, status, "run status"), message=message
        )
        return _run(self._call(self._stub.FinishRun, request))

    def record_round(
        self,
        run_id: str,
        round: int,
        edges: Iterable[Edge],
        metrics: Mapping[int, Mapping[str, Any]],
        num_clients: int = 0,
        coalitions: Iterable[Iterable[int]] | None = None,
    ) -> Run:
        """Record a completed round; the returned run says whether a stop was requested.

        ``coalitions`` None: the method forms none (an empty list means none this round).
        """
        request = pb.RoundRecord(
            run_id=run_id,
            round=round,
            num_clients=num_clients,
            edges=_edges_pb(edges),
            metrics_json=_metrics_pb(metrics),
            **_coalitions_fields(coalitions),
        )
        return _run(self._call(self._stub.RecordRound, request))

    def record_event(
        self,
        run_id: str,
        kind: str,
        message: str = "",
        level: str = "warning",
        round: int | None = None,
        client_id: int | None = None,
    ) -> Event:
        request = pb.Event(
            run_id=run_id,
            kind=kind,
            message=message,
            level=_value_of(_EVENT_LEVEL, level, "event level"),
            round=round,
            client_id=client_id,
        )
        return _event(self._call(self._stub.RecordEvent, request))

    def list_events(self, run_id: str = "", after_id: int = 0, limit: int = 0) -> list[Event]:
        request = pb.ListEventsRequest(run_id=run_id, after_id=after_id, limit=limit)
        return [_event(e) for e in self._call(self._stub.ListEvents, request).events]

    def issue_grants(
        self, run_id: str, round: int, fetcher: int, owners: Iterable[int], ttl_s: float
    ) -> dict[int, bytes]:
        """One signed token per owner, for ``fetcher`` to present when fetching its model."""
        request = pb.IssueGrantsRequest(
            run_id=run_id, round=round, fetcher=fetcher, owners=list(owners), ttl_s=ttl_s
        )
        return {g.owner: g.token for g in self._call(self._stub.IssueGrants, request).grants}

    def get_round(self, run_id: str, round: int) -> RoundRecord:
        reply = self._call(self._stub.GetRound, pb.RoundRef(run_id=run_id, round=round))
        return RoundRecord(
            reply.run_id,
            reply.round,
            reply.num_clients,
            _edges(reply.edges),
            _metrics(reply.metrics_json),
            reply.recorded_at,
            _coalitions(reply.coalitions) if reply.has_coalitions else None,
        )

    def get_graph_history(self, run_id: str) -> list[RoundGraph]:
        reply = self._call(self._stub.GetGraphHistory, pb.RunRef(run_id=run_id))
        return [RoundGraph(g.round, g.num_clients, _edges(g.edges)) for g in reply.rounds]

    def get_metrics(self, run_id: str) -> dict[int, dict[int, dict[str, Any]]]:
        """Per round (in order), per client: its metrics."""
        reply = self._call(self._stub.GetMetrics, pb.RunRef(run_id=run_id))
        return {r.round: _metrics(r.metrics_json) for r in reply.rounds}

    def get_coalitions(self, run_id: str, round: int | None = None) -> dict[int, Coalitions]:
        """Per round that recorded coalitions (in order), or of ``round`` only: its coalitions."""
        request = pb.CoalitionsRequest(run_id=run_id, round=round)
        reply = self._call(self._stub.GetCoalitions, request)
        return {r.round: _coalitions(r.coalitions) for r in reply.rounds}

    def status(self) -> CoordinatorStatus:
        reply = self._call(self._stub.Status, pb.StatusRequest())
        return CoordinatorStatus(
            reply.uptime_s,
            reply.db_path,
            reply.num_members,
            reply.num_runs,
            [_run(r) for r in reply.active_runs],
        )


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InvalidRecord(f"{what} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise InvalidRecord(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _name_of(names: Mapping[str, int], value: int, what: str) -> str:
    for name, number in names.items():
        if number == value:
            return name
    raise InvalidRecord(f"{what} must be one of {', '.join(names)}")


def _value_of(names: Mapping[str, int], name: str, what: str) -> int:
    if name not in names:
        raise InvalidRecord(f"{what} must be one of {', '.join(names)}, not {name!r}")
    return names[name]


def _edges_pb(edges: Iterable[Edge]) -> list[pb.Edge]:
    return [pb.Edge(i=i, j=j, weight=w) for i, j, w in edges]


def _edges(edges: Iterable[pb.Edge]) -> list[Edge]:
    return [(e.i, e.j, e.weight) for e in edges]


def _coalitions_pb(coalitions: Iterable[Iterable[int]]) -> list[pb.Coalition]:
    return [pb.Coalition(members=list(members)) for members in coalitions]


def _coalitions(coalitions: Iterable[pb.Coalition]) -> Coalitions:
    return [list(c.members) for c in coalitions]


def _coalitions_fields(coalitions: Iterable[Iterable[int]] | None) -> dict[str, Any]:
    """RoundRecord fields for ``coalitions``: None must stay distinguishable from []."""
    if coalitions is None:
        return {}
    return {"has_coalitions": True, "coalitions": _coalitions_pb(coalitions)}


def _metrics_pb(metrics: Mapping[int, Mapping[str, Any]]) -> dict[int, str]:
    return {
        int(client): json.dumps(values, default=json_scalar) for client, values in metrics.items()
    }


def _metrics(metrics_json: Mapping[int, str]) -> dict[int, dict[str, Any]]:
    return {client: json.loads(metrics_json[client]) for client in sorted(metrics_json)}


def _member_pb(member: Member) -> pb.Member:
    return pb.Member(
        client_id=member.client_id,
        flower_node_id=member.flower_node_id,
        peer_address=member.peer_address,
        num_samples=member.num_samples,
        registered_at=member.registered_at,
        updated_at=member.updated_at,
    )


def _member(member: pb.Member) -> Member:
    return Member(
        member.client_id,
        member.flower_node_id,
        member.peer_address,
        member.num_samples,
        member.registered_at,
        member.updated_at,
    )


def _run_pb(run: Run) -> pb.Run:
    return pb.Run(
        run_id=run.run_id,
        method=run.method,
        config_json=json.dumps(run.config),
        status=_RUN_STATUS[run.status],
        last_completed_round=run.last_completed_round,
        created_at=run.created_at,
        updated_at=run.updated_at,
        message=run.message,
    )


def _run(run: pb.Run) -> Run:
    return Run(
        run.run_id,
        run.method,
        json.loads(run.config_json),
        _name_of(_RUN_STATUS, run.status, "run status"),
        run.last_completed_round if run.HasField("last_completed_round") else None,
        run.created_at,
        run.updated_at,
        run.message,
    )


def _event_pb(event: Event) -> pb.Event:
    return pb.Event(
        event_id=event.event_id,
        run_id=event.run_id,
        round=event.round,
        level=_EVENT_LEVEL[event.level],
        kind=event.kind,
        client_id=event.client_id,
        message=event.message,
        time=event.time,
    )


def _event(event: pb.Event) -> Event:
    return Event(
        event.event_id,
        event.run_id,
        _name_of(_EVENT_LEVEL, event.level, "event level"),
        event.kind,
        event.message,
        event.time,
        event.round if event.HasField("round") else None,
        event.client_id if event.HasField("client_id") else None,
    )
