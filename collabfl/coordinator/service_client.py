"""A typed client of the coordinator's gRPC service.

The ServerApp, the federation harness and the admin CLI talk to a coordinator only through
``CoordinatorClient``, which hands back the plain dataclasses of ``state`` and turns gRPC
failures into two exceptions: ``CoordinatorUnreachable`` (nothing answered: check the
address, the daemon, TLS) and ``CoordinatorError`` (it answered no, with a reason).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from collabfl.coordinator.member_status import MemberStatus
from collabfl.coordinator.service_codec import (
    CHANNEL_OPTIONS,
    coalitions_fields,
    coalitions_from_pb,
    edges_from_pb,
    edges_to_pb,
    enrolment_from_pb,
    event_from_pb,
    event_level_to_pb,
    member_from_pb,
    member_status_from_pb,
    member_to_pb,
    metrics_from_pb,
    metrics_to_pb,
    run_from_pb,
    run_results_from_pb,
    run_status_to_pb,
)
from collabfl.coordinator.store.enrolment_store import Enrolment
from collabfl.coordinator.store.records import (
    Coalitions,
    Edge,
    Event,
    Member,
    RoundGraph,
    RoundRecord,
    Run,
)
from collabfl.coordinator.store.run_files import RunResults
from collabfl.kernel.tls import ClientTLS
from collabfl.proto import coordinator_pb2 as pb
from collabfl.proto import coordinator_pb2_grpc as pb_grpc

_Reply = TypeVar("_Reply")


@dataclass(frozen=True)
class CoordinatorStatus:
    uptime_s: float
    db_path: str
    num_members: int
    num_runs: int
    active_runs: list[Run]
    members: list[MemberStatus]
    """Every member known, by client id, with its host, presence and certificate."""
    supernodes_error: str
    """Why presence is unknown (the SuperLink's node list could not be read); else ""."""
    unbound_nodes: list[int]
    """Flower nodes online that are bound to no member."""


class CoordinatorUnreachable(ConnectionError):
    """No coordinator answered at the address (not running, wrong address, TLS mismatch)."""


class CoordinatorError(RuntimeError):
    """The coordinator answered with an error; ``code`` says which kind."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


CREATE_RUN_S = 120.0
"""The least deadline of ``CreateRun``: a coordinator's first run request loads the method
code (torch: seconds on a loaded machine), and a client that gave up on a run the
coordinator then created anyway would report a failure that did not happen."""
EVENT_PAGE = 1000
"""Events per ListEvents call when listing them all: no reply grows with the event count."""
REVOKE_S = 60.0
"""The least deadline of a Revoke call (see ``CoordinatorClient.revoke``)."""


class CoordinatorClient:
    """One method per RPC, returning ``state`` dataclasses; usable as a context manager.

    ``tls``: the federation's CA and this caller's certificate and key (the service admits
    callers by the role their certificate names). ``launch_token``: the ServerApp's, which
    its writes (rounds, events, finishing, grants) carry.
    """

    def __init__(
        self,
        address: str,
        timeout_s: float = 5.0,
        tls: ClientTLS | None = None,
        launch_token: str = "",
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.launch_token = launch_token
        if tls is None:
            self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.secure_channel(address, tls.credentials(), CHANNEL_OPTIONS)
        self._stub = pb_grpc.CoordinatorStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, rpc: Callable[..., _Reply], request: Any, timeout_s: float | None = None
    ) -> _Reply:
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            return rpc(request, timeout=timeout_s)
        except grpc.RpcError as error:
            raise self._translate(error, timeout_s) from None

    def _translate(self, error: grpc.RpcError, timeout_s: float) -> Exception:
        code: grpc.StatusCode = error.code()
        details: str = error.details() or code.name
        if code == grpc.StatusCode.UNAVAILABLE:
            reason = f"cannot reach the coordinator at {self.address} ({details})"
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            reason = f"the coordinator at {self.address} did not answer within {timeout_s:g} s"
        else:
            return CoordinatorError(code, details)
        return CoordinatorUnreachable(
            f"{reason}; check that collabfl-coordinator is running there, the host and port "
            "(--coordinator or COLLABFL_COORDINATOR), and that both sides agree on TLS"
        )

    def register_members(self, members: Iterable[Member], run_id: str = "") -> list[Member]:
        """Register ``members``; a ServerApp names its run (``run_id``) and sends its token."""
        request = pb.RegisterMembersRequest(
            members=[member_to_pb(m) for m in members],
            run_id=run_id,
            launch_token=self.launch_token,
        )
        return [member_from_pb(m) for m in self._call(self._stub.RegisterMembers, request).members]

    def list_members(self) -> list[Member]:
        reply = self._call(self._stub.ListMembers, pb.ListMembersRequest())
        return [member_from_pb(m) for m in reply.members]

    def create_run(
        self,
        run_id: str,
        method: str,
        config: Mapping[str, Any],
        overwrite: bool = False,
        out_claimed: bool = False,
    ) -> Run:
        """Create the run; its deadline is at least ``CREATE_RUN_S`` (see there).
        ``overwrite``: replace an earlier run held by the new run's folder; ``out_claimed``:
        the caller prepared that folder itself, for several runs (no check)."""
        request = pb.CreateRunRequest(
            run_id=run_id,
            method=method,
            config_json=json.dumps(config),
            overwrite=overwrite,
            out_claimed=out_claimed,
        )
        timeout_s = max(self.timeout_s, CREATE_RUN_S)
        return run_from_pb(self._call(self._stub.CreateRun, request, timeout_s))

    def get_run(self, run_id: str) -> Run:
        return run_from_pb(self._call(self._stub.GetRun, pb.RunRef(run_id=run_id)))

    def list_runs(self) -> list[Run]:
        return [run_from_pb(r) for r in self._call(self._stub.ListRuns, pb.ListRunsRequest()).runs]

    def stop_run(self, run_id: str) -> Run:
        return run_from_pb(self._call(self._stub.StopRun, pb.RunRef(run_id=run_id)))

    def finish_run(self, run_id: str, status: str = "finished", message: str = "") -> Run:
        request = pb.FinishRunRequest(
            run_id=run_id,
            status=run_status_to_pb(status),
            message=message,
            launch_token=self.launch_token,
        )
        return run_from_pb(self._call(self._stub.FinishRun, request))

    def set_run_message(self, run_id: str, message: str) -> Run:
        """The run's status line ("" clears it): the ServerApp's, with its launch token."""
        request = pb.RunMessage(run_id=run_id, message=message, launch_token=self.launch_token)
        return run_from_pb(self._call(self._stub.SetRunMessage, request))

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
            edges=edges_to_pb(edges),
            metrics_json=metrics_to_pb(metrics),
            launch_token=self.launch_token,
            **coalitions_fields(coalitions),
        )
        return run_from_pb(self._call(self._stub.RecordRound, request))

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
            level=event_level_to_pb(level),
            round=round,
            client_id=client_id,
            launch_token=self.launch_token,
        )
        return event_from_pb(self._call(self._stub.RecordEvent, request))

    def list_events(self, run_id: str = "", after_id: int = 0, limit: int = 0) -> list[Event]:
        """Events oldest first; ``limit`` 0: all of them, fetched EVENT_PAGE at a time."""
        if limit:
            return self._events(run_id, after_id, limit)
        events: list[Event] = []
        while batch := self._events(run_id, after_id, EVENT_PAGE):
            events += batch
            after_id = batch[-1].event_id
        return events

    def _events(self, run_id: str, after_id: int, limit: int) -> list[Event]:
        request = pb.ListEventsRequest(run_id=run_id, after_id=after_id, limit=limit)
        return [event_from_pb(e) for e in self._call(self._stub.ListEvents, request).events]

    def issue_grants(
        self, run_id: str, round: int, fetches: Mapping[int, Iterable[int]], ttl_s: float
    ) -> dict[int, dict[int, bytes]]:
        """A round's grants in one call: per fetcher, one signed token per owner in
        ``fetches`` (fetcher -> owners), to present when fetching that owner's model."""
        request = pb.IssueGrantsRequest(
            run_id=run_id,
            round=round,
            fetches=[pb.Fetch(fetcher=k, owners=list(owners)) for k, owners in fetches.items()],
            ttl_s=ttl_s,
            launch_token=self.launch_token,
        )
        reply: pb.RoundGrants = self._call(self._stub.IssueGrants, request)
        return {f.fetcher: {g.owner: g.token for g in f.grants} for f in reply.fetches}

    def get_round(self, run_id: str, round: int) -> RoundRecord:
        reply = self._call(self._stub.GetRound, pb.RoundRef(run_id=run_id, round=round))
        return RoundRecord(
            reply.run_id,
            reply.round,
            reply.num_clients,
            edges_from_pb(reply.edges),
            metrics_from_pb(reply.metrics_json),
            reply.recorded_at,
            coalitions_from_pb(reply.coalitions) if reply.has_coalitions else None,
        )

    def get_graph_history(self, run_id: str) -> list[RoundGraph]:
        reply = self._call(self._stub.GetGraphHistory, pb.RunRef(run_id=run_id))
        return [RoundGraph(g.round, g.num_clients, edges_from_pb(g.edges)) for g in reply.rounds]

    def get_metrics(self, run_id: str) -> dict[int, dict[int, dict[str, Any]]]:
        """Per round (in order), per client: its metrics."""
        reply = self._call(self._stub.GetMetrics, pb.RunRef(run_id=run_id))
        return {r.round: metrics_from_pb(r.metrics_json) for r in reply.rounds}

    def get_coalitions(self, run_id: str, round: int | None = None) -> dict[int, Coalitions]:
        """Per round that recorded coalitions (in order), or of ``round`` only: its coalitions."""
        request = pb.CoalitionsRequest(run_id=run_id, round=round)
        reply = self._call(self._stub.GetCoalitions, request)
        return {r.round: coalitions_from_pb(r.coalitions) for r in reply.rounds}

    def run_results(self, run_id: str) -> RunResults:
        """The run's results table and the files its folder holds on the coordinator."""
        return run_results_from_pb(self._call(self._stub.GetRunResults, pb.RunRef(run_id=run_id)))

    def read_run_file(self, run_id: str, path: str, offset: int = 0) -> tuple[bytes, int]:
        """A chunk (at most ``run_files.CHUNK_BYTES``) of the run's file ``path`` from
        ``offset``, and the file's size."""
        request = pb.RunFileRequest(run_id=run_id, path=path, offset=offset)
        reply = self._call(self._stub.ReadRunFile, request)
        return reply.data, reply.size

    def messages_pushed(self, run_id: str) -> int:
        """Say this run's ServerApp pushed messages (the gateway's held pulls ask again now);
        returns how many replies SuperNodes have pushed so far."""
        request = pb.FleetSignal(run_id=run_id, launch_token=self.launch_token)
        activity: pb.FleetActivity = self._call(self._stub.MessagesPushed, request)
        return activity.replies

    def await_replies(self, run_id: str, seen: int, timeout_s: float) -> int:
        """How many replies SuperNodes have pushed, once more than ``seen`` or after
        ``timeout_s``."""
        request = pb.FleetSignal(
            run_id=run_id, launch_token=self.launch_token, seen=seen, timeout_s=timeout_s
        )
        activity: pb.FleetActivity = self._call(self._stub.AwaitReplies, request)
        return activity.replies

    def invite(
        self, role: str, subject: str, hosts: list[str], ttl_s: float, samples: int | None = None
    ) -> pb.Invitation:
        """A single-use join token for ``role``/``subject`` (coordinator/enrolment/enrolment.py);
        ``samples``: a member's declared training samples."""
        request = pb.InviteRequest(
            role=role, subject=subject, hosts=hosts, ttl_s=ttl_s, samples=samples or 0
        )
        invitation: pb.Invitation = self._call(self._stub.Invite, request)
        return invitation

    def revoke(self, role: str, subject: str) -> Enrolment:
        """Revoke the identity; at least ``REVOKE_S`` to answer: the coordinator unregisters
        its SuperNode with a ``flwr`` command, seconds on a busy machine."""
        request = pb.RevokeRequest(role=role, subject=subject)
        timeout_s = max(self.timeout_s, REVOKE_S)
        return enrolment_from_pb(self._call(self._stub.Revoke, request, timeout_s))

    def register_supernode(self, client_id: int, public_key: str) -> tuple[int, int | None]:
        """Register a member's SuperNode key by hand; the node id Flower gave it, and the
        member's previous key's node (unregistered), if it had one. At least ``REVOKE_S``
        to answer: registering and unregistering are SuperLink calls."""
        request = pb.RegisterSupernodeRequest(client_id=client_id, public_key=public_key)
        reply = self._call(self._stub.RegisterSupernode, request, max(self.timeout_s, REVOKE_S))
        old = reply.replaced_node_id if reply.HasField("replaced_node_id") else None
        return reply.flower_node_id, old

    def list_enrolments(self) -> list[Enrolment]:
        reply = self._call(self._stub.ListEnrolments, pb.ListEnrolmentsRequest())
        return [enrolment_from_pb(e) for e in reply.enrolments]

    def status(self) -> CoordinatorStatus:
        reply = self._call(self._stub.Status, pb.StatusRequest())
        return CoordinatorStatus(
            reply.uptime_s,
            reply.db_path,
            reply.num_members,
            reply.num_runs,
            [run_from_pb(r) for r in reply.active_runs],
            [member_status_from_pb(m) for m in reply.members],
            reply.supernodes_error,
            list(reply.unbound_nodes),
        )
