"""The coordinator's gRPC servicer over CoordinatorState, and ``serve`` to start it.

Each RPC first admits its caller (``authorization.POLICY``, by the TLS client certificate)
and checks the request's size, then decodes it (``service_codec``), checks what the state
alone cannot (a valid run config, one active run, the ServerApp's launch token, rounds in
order), asks the state and encodes the reply. Errors become gRPC status codes whose details
are the readable message, which ``service_client.CoordinatorClient`` turns back into
exceptions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from pydantic import ValidationError

from collabfl.coordinator.admission import (
    AnotherRunActive,
    RoundOutOfOrder,
    admitted,
    check_launch,
)
from collabfl.coordinator.enrolment.coordinator_pki import CannotIssue
from collabfl.coordinator.enrolment.enrolment import (
    DEFAULT_TOKEN_TTL_S,
    Enroller,
    EnrolmentUnavailable,
    enrolling_role,
)
from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.member_status import SupernodeList, member_statuses
from collabfl.coordinator.relay.substep_relay import SubstepRelay
from collabfl.coordinator.relay.substep_service import WORKERS, SubstepService
from collabfl.coordinator.service_codec import (
    SERVER_OPTIONS,
    coalitions_fields,
    coalitions_from_pb,
    coalitions_to_pb,
    edges_from_pb,
    edges_to_pb,
    enrolment_to_pb,
    event_level_from_pb,
    event_to_pb,
    member_from_pb,
    member_status_to_pb,
    member_to_pb,
    metrics_to_pb,
    parse_json_object,
    run_results_to_pb,
    run_status_from_pb,
    run_to_pb,
)
from collabfl.coordinator.store.enrolment_store import EnrolmentStore
from collabfl.coordinator.store.record_rules import InvalidRecord, check_run_id
from collabfl.coordinator.store.run_files import read_chunk, run_folder, run_results
from collabfl.coordinator.store.state import CoordinatorState, RoundWindow
from collabfl.flower.reported_sizes import undeclared, undeclared_message

if TYPE_CHECKING:
    from collabfl.engine.methods import MethodSpec
from collabfl.kernel.identity import Role, caller_identity
from collabfl.kernel.tls import ServerTLS
from collabfl.proto import coordinator_pb2 as pb
from collabfl.proto import coordinator_pb2_grpc as pb_grpc
from collabfl.proto import substeps_pb2_grpc

log = logging.getLogger(__name__)

MAX_GRANT_TTL_S = 3600.0
MAX_REPLY_WAIT_S = 5.0
"""An AwaitReplies call holds one service thread; the ServerApp asks again after it."""
"""Grants are for one round's fetches; anything longer is more likely a unit mistake."""


class GrantIssuer(Protocol):
    """Signs fetch grants (``collabfl.kernel.grants.GrantSigner`` in a real coordinator)."""

    def issue(self, run: str, fetcher: int, owner: int, round: int, ttl_s: float) -> bytes: ...


class CoordinatorService(pb_grpc.CoordinatorServicer):
    """The Coordinator RPCs: decode the request, ask the state, encode the reply.

    ``authenticate`` False (no TLS) admits every caller; ``runs_dir`` is where runs may
    write (``RunOptions.run_dir``).
    """

    def __init__(
        self,
        state: CoordinatorState,
        signer: GrantIssuer,
        runs_dir: Path,
        authenticate: bool,
        activity: FleetActivity,
        enroller: Enroller | None = None,
        supernodes: SupernodeList | None = None,
    ) -> None:
        self._state = state
        self._enroller = enroller
        self._enrolments = (
            enroller.store if enroller is not None else EnrolmentStore(state.database)
        )
        self._supernodes = supernodes
        """The SuperLink's node list (None: this service cannot read it, e.g. in tests)."""
        self._signer = signer
        self._runs_dir = runs_dir
        self.authenticate = authenticate
        self._activity = activity
        self._started = time.monotonic()
        self._writes = threading.Lock()
        """Serialises the check-then-write RPCs (one active run, rounds in order)."""

    def _check_launch(self, rpc: str, run_id: str, token: str) -> None:
        check_launch(self._state, rpc, run_id, token)

    @admitted
    def RegisterMembers(self, request: pb.RegisterMembersRequest, context: Any) -> pb.MemberList:
        """The operator registers members freely; the coordinator's certificate (a ServerApp)
        only with its run's current launch token, as for every other ServerApp write."""
        caller = caller_identity(context) if self.authenticate else None
        if caller is not None and caller.role is Role.COORDINATOR:
            self._check_launch("RegisterMembers", request.run_id, request.launch_token)
        members = self._state.register_members(member_from_pb(m) for m in request.members)
        return pb.MemberList(members=[member_to_pb(m) for m in members])

    @admitted
    def ListMembers(self, request: pb.ListMembersRequest, context: Any) -> pb.MemberList:
        return pb.MemberList(members=[member_to_pb(m) for m in self._state.members()])

    @admitted
    def CreateRun(self, request: pb.CreateRunRequest, context: Any) -> pb.Run:
        """Only a config the ServerApp can run, writing inside the runs directory into a
        folder that holds no earlier run (unless ``overwrite``: the same rule as ``collabfl
        compare --out``), and only while no other run is active (its clients are busy;
        never disturb them)."""
        # Not imported at start, which clients starting beside the coordinator on one machine
        # would wait on; checking a run request imports neither torch nor Flower
        # (tests/test_config_imports.py), so this costs the first run a fraction of a second.
        from collabfl.engine.config import ConfigError
        from collabfl.engine.methods import read_run_request
        from collabfl.engine.report.run_dir import claim_output_dir

        check_run_id(request.run_id)
        config = parse_json_object(request.config_json or "{}", "config_json")
        spec, options = read_run_request(request.method, config)
        missing = self._undeclared_members(spec)
        if missing and spec.config.federation.require_declared_sizes:
            raise ConfigError(f"federation.require_declared_sizes: {undeclared_message(missing)}")
        run_dir = options.run_dir(self._runs_dir, request.run_id)
        with self._writes:
            runs = self._state.runs()
            for run in runs:
                if run.active and run.run_id != request.run_id:
                    raise AnotherRunActive(
                        f"run {run.run_id} is active ({run.status}); stop it (collabfl admin "
                        f"stop {run.run_id}) or wait for it to end before starting {request.run_id}"
                    )
            resumed = any(run.run_id == request.run_id for run in runs)  # keeps its folder
            if not (resumed or request.out_claimed):
                claim_output_dir(run_dir, request.overwrite)
            created = self._state.create_run(request.run_id, request.method, config)
            if missing:
                self._state.record_event(
                    created.run_id, "undeclared_sizes", undeclared_message(missing)
                )
        self._activity.runs.ring()
        return run_to_pb(created)

    def _undeclared_members(self, spec: MethodSpec) -> list[int]:
        """The enrolled members (not revoked) whose sizes the run would take on their word."""
        enrolled = [int(e.subject) for e in self._enrolments.enrolments("member") if not e.revoked]
        declared = {
            **self._enrolments.declared_samples(),
            **spec.config.federation.declared_sizes,
        }
        return undeclared(spec.name, enrolled, declared)

    @admitted
    def GetRun(self, request: pb.RunRef, context: Any) -> pb.Run:
        return run_to_pb(self._state.run(request.run_id))

    @admitted
    def ListRuns(self, request: pb.ListRunsRequest, context: Any) -> pb.RunList:
        return pb.RunList(runs=[run_to_pb(run) for run in self._state.runs()])

    @admitted
    def StopRun(self, request: pb.RunRef, context: Any) -> pb.Run:
        return run_to_pb(self._state.request_stop(request.run_id))

    @admitted
    def FinishRun(self, request: pb.FinishRunRequest, context: Any) -> pb.Run:
        status = run_status_from_pb(request.status)
        self._check_launch("FinishRun", request.run_id, request.launch_token)
        return run_to_pb(self._state.finish_run(request.run_id, status, request.message))

    @admitted
    def RecordRound(self, request: pb.RoundRecord, context: Any) -> pb.Run:
        """Only the round after the last completed one (0 first), or the last again: a retry
        whose reply was lost. A gap or a rewrite of history is refused."""
        metrics = {
            client: parse_json_object(text, f"metrics of client {client}")
            for client, text in request.metrics_json.items()
        }
        if request.coalitions and not request.has_coalitions:
            raise InvalidRecord("coalitions sent without has_coalitions set")
        with self._writes:
            self._check_launch("RecordRound", request.run_id, request.launch_token)
            current = self._state.run(request.run_id)
            last = current.last_completed_round
            expected = _current_round(last)
            if request.round not in (expected, last):
                raise RoundOutOfOrder(
                    f"run {request.run_id}: round {request.round} refused, the next round is "
                    f"{expected}"
                )
            run = self._state.record_round(
                request.run_id,
                request.round,
                edges_from_pb(request.edges),
                metrics,
                request.num_clients,
                coalitions_from_pb(request.coalitions) if request.has_coalitions else None,
                round_window(current.config),
            )
        return run_to_pb(run)

    @admitted
    def RecordEvent(self, request: pb.Event, context: Any) -> pb.Event:
        level = event_level_from_pb(request.level)
        if not request.run_id:
            raise InvalidRecord("an event names its run (federation-wide events are the "
                                "coordinator's own)")  # fmt: skip
        self._check_launch("RecordEvent", request.run_id, request.launch_token)
        event = self._state.record_event(
            request.run_id,
            request.kind,
            request.message,
            level,
            request.round if request.HasField("round") else None,
            request.client_id if request.HasField("client_id") else None,
        )
        return event_to_pb(event)

    @admitted
    def ListEvents(self, request: pb.ListEventsRequest, context: Any) -> pb.EventList:
        events = self._state.events(request.run_id, request.after_id, request.limit)
        return pb.EventList(events=[event_to_pb(e) for e in events])

    @admitted
    def IssueGrants(self, request: pb.IssueGrantsRequest, context: Any) -> pb.RoundGrants:
        """A round's grants, only from the run's current launch, for its active run and the
        round in progress, between registered members, for a sane TTL; every fetch is
        checked before any grant is signed."""
        run = self._state.active_run(request.run_id)
        if not 0 < request.ttl_s <= MAX_GRANT_TTL_S:
            raise InvalidRecord(f"ttl_s must be in (0, {MAX_GRANT_TTL_S:g}], got {request.ttl_s}")
        if request.round < 0:
            raise InvalidRecord(f"round must be >= 0, got {request.round}")
        self._check_launch("IssueGrants", request.run_id, request.launch_token)
        current = _current_round(run.last_completed_round)
        if request.round != current:
            raise RoundOutOfOrder(
                f"run {run.run_id}: grants are for the round in progress ({current}), "
                f"not round {request.round}"
            )
        fetchers = [fetch.fetcher for fetch in request.fetches]
        if len(set(fetchers)) != len(fetchers):
            raise InvalidRecord(f"fetchers {fetchers} lists a client twice")
        for fetch in request.fetches:
            self._check_fetch(fetch.fetcher, list(fetch.owners))
        return pb.RoundGrants(
            fetches=[
                pb.FetcherGrants(
                    fetcher=fetch.fetcher,
                    grants=[
                        pb.Grant(
                            owner=owner,
                            token=self._signer.issue(
                                run.run_id, fetch.fetcher, owner, request.round, request.ttl_s
                            ),
                        )
                        for owner in fetch.owners
                    ],
                )
                for fetch in request.fetches
            ]
        )

    def _check_fetch(self, fetcher: int, owners: list[int]) -> None:
        """A fetch names registered members, each owner once, and not the fetcher itself."""
        if len(set(owners)) != len(owners):
            raise InvalidRecord(f"owners {owners} lists a client twice")
        if fetcher in owners:
            raise InvalidRecord(f"client {fetcher} needs no grant for its own model")
        for client in (fetcher, *owners):
            self._state.member(client)

    @admitted
    def GetRound(self, request: pb.RoundRef, context: Any) -> pb.RoundRecord:
        record = self._state.round(request.run_id, request.round)
        return pb.RoundRecord(
            run_id=record.run_id,
            round=record.round,
            num_clients=record.num_clients,
            edges=edges_to_pb(record.edges),
            metrics_json=metrics_to_pb(record.metrics),
            recorded_at=record.recorded_at,
            **coalitions_fields(record.coalitions),
        )

    @admitted
    def GetGraphHistory(self, request: pb.RunRef, context: Any) -> pb.GraphHistory:
        rounds = [
            pb.RoundGraph(round=g.round, num_clients=g.num_clients, edges=edges_to_pb(g.edges))
            for g in self._state.graph_history(request.run_id)
        ]
        return pb.GraphHistory(run_id=request.run_id, rounds=rounds)

    @admitted
    def GetMetrics(self, request: pb.RunRef, context: Any) -> pb.MetricsHistory:
        rounds = [
            pb.RoundMetrics(round=r, metrics_json=metrics_to_pb(by_client))
            for r, by_client in self._state.metrics(request.run_id).items()
        ]
        return pb.MetricsHistory(run_id=request.run_id, rounds=rounds)

    @admitted
    def GetCoalitions(self, request: pb.CoalitionsRequest, context: Any) -> pb.CoalitionHistory:
        round = request.round if request.HasField("round") else None
        rounds = [
            pb.RoundCoalitions(round=r, coalitions=coalitions_to_pb(coalitions))
            for r, coalitions in self._state.coalitions(request.run_id, round).items()
        ]
        return pb.CoalitionHistory(run_id=request.run_id, rounds=rounds)

    @admitted
    def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusReply:
        runs = self._state.runs()
        if self._supernodes is None:
            nodes, error = None, "this coordinator service does not read the SuperLink's nodes"
            read_at = 0.0
        else:
            nodes, error, read_at = self._supernodes.get()
        members, unbound = member_statuses(
            self._state.members(),
            self._state.supernode_bindings(),
            self._enrolments.enrolments("member"),
            nodes,
            read_at,
        )
        return pb.StatusReply(
            uptime_s=time.monotonic() - self._started,
            db_path=str(self._state.path),
            num_members=len(members),
            num_runs=len(runs),
            active_runs=[run_to_pb(run) for run in runs if run.active],
            members=[member_status_to_pb(m) for m in members],
            supernodes_error=error,
            unbound_nodes=unbound,
        )

    @admitted
    def Invite(self, request: pb.InviteRequest, context: Any) -> pb.Invitation:
        role = enrolling_role(request.role)
        invitation = self._enrolment().invite(
            role,
            request.subject,
            list(request.hosts),
            request.ttl_s or DEFAULT_TOKEN_TTL_S,
            samples=request.samples or None,
        )
        return pb.Invitation(
            token=invitation.token,
            token_id=invitation.token_id,
            role=invitation.role,
            subject=invitation.subject,
            expires_at=invitation.expires_at,
            join_address=self._enrolment().join_address,
        )

    @admitted
    def Revoke(self, request: pb.RevokeRequest, context: Any) -> pb.Enrolment:
        revoked = self._enrolment().revoke(enrolling_role(request.role), request.subject)
        return enrolment_to_pb(revoked)

    @admitted
    def ListEnrolments(self, request: pb.ListEnrolmentsRequest, context: Any) -> pb.EnrolmentList:
        enrolments = self._enrolment().store.enrolments()
        return pb.EnrolmentList(enrolments=[enrolment_to_pb(e) for e in enrolments])

    @admitted
    def RegisterSupernode(
        self, request: pb.RegisterSupernodeRequest, context: Any
    ) -> pb.SupernodeRegistration:
        """An operator's hand registration of a member's SuperNode key; its old key goes."""
        if request.client_id < 0:
            raise ValueError(f"client id must be >= 0, got {request.client_id}")
        try:
            node_id, old = self._enrolment().register_supernode(
                request.client_id, request.public_key
            )
        except EnrolmentUnavailable as error:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        replaced = "" if old is None else f"; its old key (Flower node {old}) is unregistered"
        self._state.record_event(
            "",
            "supernode_registered",
            f"an operator registered client {request.client_id}'s SuperNode key as Flower "
            f"node {node_id}{replaced}",
            "info",
            client_id=request.client_id,
        )
        return pb.SupernodeRegistration(flower_node_id=node_id, replaced_node_id=old)

    @admitted
    def GetRunResults(self, request: pb.RunRef, context: Any) -> pb.RunResults:
        """For an operator elsewhere: the run's results table and its folder's listing."""
        check_run_id(request.run_id)
        folder = run_folder(self._runs_dir, self._state.run(request.run_id))
        return run_results_to_pb(run_results(folder, request.run_id))

    @admitted
    def ReadRunFile(self, request: pb.RunFileRequest, context: Any) -> pb.RunFileChunk:
        """One chunk of a file in the run's folder; ``run_files`` keeps the path inside."""
        check_run_id(request.run_id)
        folder = run_folder(self._runs_dir, self._state.run(request.run_id))
        data, size = read_chunk(folder, request.path, request.offset)
        return pb.RunFileChunk(data=data, size=size)

    def _enrolment(self) -> Enroller:
        if self._enroller is None:
            raise CannotIssue("this coordinator runs without TLS: nobody enrols by token")
        return self._enroller

    @admitted
    def SetRunMessage(self, request: pb.RunMessage, context: Any) -> pb.Run:
        if "\n" in request.message:
            raise InvalidRecord("a run message is one line")
        self._check_launch("SetRunMessage", request.run_id, request.launch_token)
        return run_to_pb(self._state.set_run_message(request.run_id, request.message))

    @admitted
    def MessagesPushed(self, request: pb.FleetSignal, context: Any) -> pb.FleetActivity:
        self._check_launch("MessagesPushed", request.run_id, request.launch_token)
        self._activity.messages.ring()
        return pb.FleetActivity(replies=self._activity.replies.count)

    @admitted
    def AwaitReplies(self, request: pb.FleetSignal, context: Any) -> pb.FleetActivity:
        if not 0 <= request.timeout_s <= MAX_REPLY_WAIT_S:
            raise InvalidRecord(
                f"timeout_s must be in [0, {MAX_REPLY_WAIT_S:g}], got {request.timeout_s}"
            )
        self._check_launch("AwaitReplies", request.run_id, request.launch_token)
        replies = self._activity.replies.wait(request.seen, request.timeout_s)
        return pb.FleetActivity(replies=replies)


def round_window(config: Mapping[str, Any]) -> RoundWindow:
    """(keep_last, keep_every): the rounds of a run the database keeps, as its config's
    ``retention`` keeps graph files (CreateRun validated it; a run stored otherwise keeps
    the defaults' window)."""
    from collabfl.engine.config import RetentionConfig  # imported by CreateRun already

    experiment = config.get("experiment")
    asked = experiment.get("retention") if isinstance(experiment, Mapping) else None
    try:
        retention = RetentionConfig.model_validate(asked if isinstance(asked, Mapping) else {})
    except ValidationError:
        retention = RetentionConfig()
    return retention.graphs_keep_last, retention.graphs_keep_every


def _current_round(last_completed: int | None) -> int:
    return 0 if last_completed is None else last_completed + 1


def serve(
    state: CoordinatorState,
    signer: GrantIssuer,
    address: str = "127.0.0.1:0",
    tls: ServerTLS | None = None,
    runs_dir: Path | None = None,
    activity: FleetActivity | None = None,
    enroller: Enroller | None = None,
    supernodes: SupernodeList | None = None,
) -> tuple[grpc.Server, int]:
    """Start the service, with the sub-step relay beside it, on ``address`` (port 0: any
    free port); return it and its port.

    With ``tls`` the service admits only callers whose certificate its ``client_ca`` signed,
    by their role; without, anyone who reaches the port (loopback tests only). ``runs_dir``
    (default: ``runs`` next to the database) is the only folder runs may write into.
    ``activity``: the signals shared with the daemon's Fleet gateway
    (coordinator/gateway/doorbell.py).
    ``supernodes``: the SuperLink's node list, for ``Status`` (coordinator/member_status.py).
    """
    if tls is not None and tls.client_ca is None:
        raise ValueError(
            "the coordinator service needs the federation's CA as client CA: it admits callers "
            "by their certificates (--ssl-ca-certfile)"
        )
    if tls is None:
        log.warning(
            "coordinator service on %s WITHOUT TLS: anyone who reaches it may read and steer "
            "the federation; use this only on loopback for tests",
            address,
        )
    service = CoordinatorService(
        state,
        signer,
        runs_dir or state.path.parent / "runs",
        authenticate=tls is not None,
        activity=activity or FleetActivity(),
        enroller=enroller,
        supernodes=supernodes,
    )
    relay = SubstepService(state, SubstepRelay(), authenticate=tls is not None)
    server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS), options=SERVER_OPTIONS)
    pb_grpc.add_CoordinatorServicer_to_server(service, server)
    substeps_pb2_grpc.add_SubstepsServicer_to_server(relay, server)
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
