"""What both ends of the coordinator service agree on: protobuf <-> ``state`` conversion.

The servicer (``service``) and the client (``service_client``) translate the same messages in
opposite directions; keeping both directions side by side here means a field added to the
proto is converted once, the same way on both ends. Malformed input raises ``InvalidRecord``,
which the servicer answers with INVALID_ARGUMENT.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from typing import Any, TypeVar

from collabfl.coordinator.member_status import MemberStatus
from collabfl.coordinator.store.enrolment_store import Enrolment
from collabfl.coordinator.store.record_rules import InvalidRecord, json_scalar
from collabfl.coordinator.store.records import Coalitions, Edge, Event, Member, Run
from collabfl.coordinator.store.run_files import RunFile, RunResults
from collabfl.proto import coordinator_pb2 as pb

MAX_REPLY_BYTES = 64 * 1024 * 1024
"""Room for a long run's dense graph history (gRPC's default is 4 MiB)."""

MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The largest request the service reads: one round of a dense graph of ~400 clients.
Requests are what an attacker controls, so the service reads no more than a round needs
(``service.REQUEST_LIMITS`` sets smaller limits per RPC)."""

MAX_STEP_BYTES = 64 * 1024 * 1024
"""One relayed sub-step's payload (a client's discriminators; a model and a gradient query):
the sub-step relay's requests may be this large (each RPC's own limit is checked on top)."""
_MESSAGE_SLACK = 64 * 1024

SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_REPLY_BYTES),
    ("grpc.max_receive_message_length", MAX_STEP_BYTES + _MESSAGE_SLACK),
]
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_REQUEST_BYTES),
    ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
]
"""The client's side of the same limits: it sends requests and reads replies."""
RELAY_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_STEP_BYTES + _MESSAGE_SLACK),
    ("grpc.max_receive_message_length", MAX_STEP_BYTES + _MESSAGE_SLACK),
]
"""Both ends of the sub-step relay send and read steps of up to MAX_STEP_BYTES."""

_Enum = TypeVar("_Enum", pb.RunStatus.ValueType, pb.EventLevel.ValueType)

_RUN_STATUS: dict[str, pb.RunStatus.ValueType] = {
    "running": pb.RUN_STATUS_RUNNING,
    "stopping": pb.RUN_STATUS_STOPPING,
    "stopped": pb.RUN_STATUS_STOPPED,
    "finished": pb.RUN_STATUS_FINISHED,
    "failed": pb.RUN_STATUS_FAILED,
}
_EVENT_LEVEL: dict[str, pb.EventLevel.ValueType] = {
    "info": pb.EVENT_LEVEL_INFO,
    "warning": pb.EVENT_LEVEL_WARNING,
    "error": pb.EVENT_LEVEL_ERROR,
}


def parse_json_object(text: str, what: str) -> dict[str, Any]:
    """A JSON object sent as text (run config, one client's metrics); ``what`` names it."""
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


def _value_of(names: Mapping[str, _Enum], name: str, what: str) -> _Enum:
    if name not in names:
        raise InvalidRecord(f"{what} must be one of {', '.join(names)}, not {name!r}")
    return names[name]


def run_status_to_pb(status: str) -> pb.RunStatus.ValueType:
    return _value_of(_RUN_STATUS, status, "run status")


def run_status_from_pb(status: int) -> str:
    return _name_of(_RUN_STATUS, status, "run status")


def event_level_to_pb(level: str) -> pb.EventLevel.ValueType:
    return _value_of(_EVENT_LEVEL, level, "event level")


def event_level_from_pb(level: int) -> str:
    return _name_of(_EVENT_LEVEL, level, "event level")


def edges_to_pb(edges: Iterable[Edge]) -> list[pb.Edge]:
    return [pb.Edge(i=i, j=j, weight=w) for i, j, w in edges]


def edges_from_pb(edges: Iterable[pb.Edge]) -> list[Edge]:
    return [(e.i, e.j, e.weight) for e in edges]


def coalitions_to_pb(coalitions: Iterable[Iterable[int]]) -> list[pb.Coalition]:
    return [pb.Coalition(members=list(members)) for members in coalitions]


def coalitions_from_pb(coalitions: Iterable[pb.Coalition]) -> Coalitions:
    return [list(c.members) for c in coalitions]


def coalitions_fields(coalitions: Iterable[Iterable[int]] | None) -> dict[str, Any]:
    """RoundRecord fields for ``coalitions``: None must stay distinguishable from []."""
    if coalitions is None:
        return {}
    return {"has_coalitions": True, "coalitions": coalitions_to_pb(coalitions)}


def metrics_to_pb(metrics: Mapping[int, Mapping[str, Any]]) -> dict[int, str]:
    """Per client: its metrics as JSON text (NumPy scalars become plain numbers)."""
    return {
        int(client): json.dumps(values, default=json_scalar) for client, values in metrics.items()
    }


def metrics_from_pb(metrics_json: Mapping[int, str]) -> dict[int, dict[str, Any]]:
    return {client: json.loads(metrics_json[client]) for client in sorted(metrics_json)}


def member_to_pb(member: Member) -> pb.Member:
    return pb.Member(
        client_id=member.client_id,
        flower_node_id=member.flower_node_id,
        peer_address=member.peer_address,
        num_samples=member.num_samples,
        registered_at=member.registered_at,
        updated_at=member.updated_at,
    )


def enrolment_to_pb(enrolment: Enrolment) -> pb.Enrolment:
    return pb.Enrolment(
        role=enrolment.role,
        subject=enrolment.subject,
        host=enrolment.host,
        cert_serial=enrolment.cert_serial,
        cert_not_after=enrolment.cert_not_after,
        enrolled_at=enrolment.enrolled_at,
        revoked_at=enrolment.revoked_at or 0.0,
        samples=enrolment.samples or 0,
    )


def enrolment_from_pb(enrolment: pb.Enrolment) -> Enrolment:
    return Enrolment(
        enrolment.role,
        enrolment.subject,
        enrolment.host,
        enrolment.cert_serial,
        enrolment.cert_not_after,
        enrolment.enrolled_at,
        enrolment.revoked_at or None,
        enrolment.samples or None,
    )


def member_from_pb(member: pb.Member) -> Member:
    return Member(
        member.client_id,
        member.flower_node_id,
        member.peer_address,
        member.num_samples,
        member.registered_at,
        member.updated_at,
    )


def member_status_to_pb(status: MemberStatus) -> pb.MemberStatus:
    return pb.MemberStatus(**asdict(status))


def member_status_from_pb(status: pb.MemberStatus) -> MemberStatus:
    return MemberStatus(**{f.name: getattr(status, f.name) for f in fields(MemberStatus)})


def run_to_pb(run: Run) -> pb.Run:
    return pb.Run(
        run_id=run.run_id,
        method=run.method,
        config_json=json.dumps(run.config),
        status=run_status_to_pb(run.status),
        last_completed_round=run.last_completed_round,
        created_at=run.created_at,
        updated_at=run.updated_at,
        message=run.message,
    )


def run_from_pb(run: pb.Run) -> Run:
    return Run(
        run.run_id,
        run.method,
        json.loads(run.config_json),
        run_status_from_pb(run.status),
        run.last_completed_round if run.HasField("last_completed_round") else None,
        run.created_at,
        run.updated_at,
        run.message,
    )


def run_results_to_pb(results: RunResults) -> pb.RunResults:
    return pb.RunResults(
        run_id=results.run_id,
        results_md=results.results_md,
        files=[pb.RunFile(path=f.path, size=f.size) for f in results.files],
        truncated=results.truncated,
    )


def run_results_from_pb(results: pb.RunResults) -> RunResults:
    files = [RunFile(f.path, f.size) for f in results.files]
    return RunResults(results.run_id, results.results_md, files, results.truncated)


def event_to_pb(event: Event) -> pb.Event:
    return pb.Event(
        event_id=event.event_id,
        run_id=event.run_id,
        round=event.round,
        level=event_level_to_pb(event.level),
        kind=event.kind,
        client_id=event.client_id,
        message=event.message,
        time=event.time,
    )


def event_from_pb(event: pb.Event) -> Event:
    return Event(
        event.event_id,
        event.run_id,
        event_level_from_pb(event.level),
        event.kind,
        event.message,
        event.time,
        event.round if event.HasField("round") else None,
        event.client_id if event.HasField("client_id") else None,
    )
