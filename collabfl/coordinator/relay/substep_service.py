"""The Substeps gRPC servicer: the sub-step relay (``substep_relay``) on the coordinator's port.

Who may do what:
- opening, feeding and closing a session is the ServerApp's: over TLS its coordinator
  certificate (``authorization.POLICY``), and always its launch's token for the run, which
  must be active;
- a poll is a member's, for its own seat only: the seat's token, which only that client got
  (in a Flower message to its node), and over TLS a member certificate naming that client.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import grpc

from collabfl.coordinator.admission import admitted, check_launch
from collabfl.coordinator.authorization import Forbidden
from collabfl.coordinator.relay.substep_relay import MAX_SEATS, StepResult, SubstepRelay
from collabfl.coordinator.service_codec import MAX_STEP_BYTES
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.kernel.identity import caller_identity
from collabfl.proto import substeps_pb2 as pb
from collabfl.proto import substeps_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

MAX_POLL_WAIT_S = 60.0
LAUNCH_RECHECK_S = 1.0
"""How long a launch found current is trusted: a relaunch stops its stale ServerApp's
relaying within this."""
MAX_RELAY_TIMEOUT_S = 24 * 3600.0
WORKERS = MAX_SEATS + 16
"""Threads the service needs so that waiting polls (one per seat) never starve a relay."""


class SubstepService(pb_grpc.SubstepsServicer):
    """Relays sessions' steps; ``authenticate`` False (no TLS) admits callers by token only."""

    def __init__(self, state: CoordinatorState, relay: SubstepRelay, authenticate: bool) -> None:
        self._state = state
        self.relay = relay
        self.authenticate = authenticate
        self._checked: dict[tuple[str, str], float] = {}
        """(run, launch token) -> when it was last found the active run's current launch."""
        self._checked_lock = threading.Lock()

    def _check_launch(self, rpc: str, ref: pb.SessionRef) -> None:
        """Only the active run's current ServerApp feeds its sessions. A launch found valid
        is trusted for LAUNCH_RECHECK_S: a step must not cost a database read."""
        key = (ref.run_id, ref.launch_token)
        with self._checked_lock:
            if time.monotonic() - self._checked.get(key, -LAUNCH_RECHECK_S) < LAUNCH_RECHECK_S:
                return
        self._state.active_run(ref.run_id)
        check_launch(self._state, rpc, ref.run_id, ref.launch_token)
        with self._checked_lock:
            self._checked = {k: t for k, t in self._checked.items() if k[0] != ref.run_id}
            self._checked[key] = time.monotonic()

    @admitted
    def OpenSession(self, request: pb.OpenSessionRequest, context: Any) -> pb.SessionReply:
        self._check_launch("OpenSession", request.ref)
        self.relay.open(request.ref.run_id, request.ref.session, dict(request.tokens))
        return pb.SessionReply()

    @admitted
    def Relay(self, request: pb.RelayRequest, context: Any) -> pb.RelayReply:
        if not 0 <= request.timeout_s <= MAX_RELAY_TIMEOUT_S:
            raise ValueError(f"timeout_s must be in [0, {MAX_RELAY_TIMEOUT_S:g}]")
        self._check_launch("Relay", request.ref)
        ref = request.ref
        relayed = self.relay.relay(
            ref.run_id,
            ref.session,
            dict(request.work),
            dict(request.awaiting),
            request.timeout_s,
            MAX_STEP_BYTES,
        )
        results = {
            k: pb.Result(payload=r.payload, error=r.error) for k, r in relayed.results.items()
        }
        return pb.RelayReply(steps=relayed.steps, results=results)

    @admitted
    def CloseSession(self, request: pb.SessionRef, context: Any) -> pb.SessionReply:
        check_launch(self._state, "CloseSession", request.run_id, request.launch_token)
        with self._checked_lock:
            self._checked = {k: t for k, t in self._checked.items() if k[0] != request.run_id}
        self.relay.close(request.run_id)
        return pb.SessionReply()

    @admitted
    def Poll(self, request: pb.PollRequest, context: grpc.ServicerContext) -> pb.PollReply:
        if self.authenticate:
            caller = caller_identity(context)
            if caller is None or caller.client_id != request.client_id:
                raise Forbidden(f"{caller} may not poll the seat of client {request.client_id}")
        if not 0 <= request.wait_s <= MAX_POLL_WAIT_S:
            raise ValueError(f"wait_s must be in [0, {MAX_POLL_WAIT_S:g}]")
        result = None
        if request.HasField("result"):
            result = StepResult(request.result.payload, request.result.error)
        work = self.relay.poll(
            request.run_id,
            request.session,
            request.client_id,
            request.token,
            request.answered,
            result,
            request.wait_s,
        )
        return pb.PollReply(
            step=work.step, work=work.payload, closed=work.closed, fed_ago_s=work.fed_ago_s
        )
