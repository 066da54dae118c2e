"""How the coordinator's gRPC servicers admit a call: the caller's role, the request's size,
the ServerApp's launch token; and how their errors become gRPC status codes.

Shared by the Coordinator service (``service``) and the sub-step relay (``substep_service``),
which serve on the same port under the same rules.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import grpc

from collabfl.coordinator.authorization import Forbidden, Unauthenticated, authorize
from collabfl.coordinator.enrolment.coordinator_pki import CannotIssue
from collabfl.coordinator.relay.substep_relay import SeatRefused, UnknownSession
from collabfl.coordinator.service_codec import MAX_REQUEST_BYTES, MAX_STEP_BYTES
from collabfl.coordinator.store.state import (
    CoordinatorState,
    NotFound,
    RunConflict,
    RunNotActive,
    StaleLaunch,
)
from collabfl.kernel.identity import caller_identity

log = logging.getLogger(__name__)

REQUEST_LIMITS: Mapping[str, int] = {
    "RecordEvent": 16 * 1024,
    "SetRunMessage": 4 * 1024,
    "CreateRun": 256 * 1024,
    "GetRunResults": 1024,
    "ReadRunFile": 4 * 1024,
    "Relay": MAX_STEP_BYTES + 4096,
    "Poll": MAX_STEP_BYTES + 4096,
}
"""Bytes per request where far less than MAX_REQUEST_BYTES is plenty: an event is a line of
text, a run config a page of settings. Every event is kept and listed, so this bounds what
one writer can make ``admin events`` read. The relay's steps may be larger."""


class RequestTooLarge(ValueError):
    """A request over its RPC's size limit."""


class AnotherRunActive(ValueError):
    """A run was created while another is active: runs share the clients, one at a time."""


class RoundOutOfOrder(ValueError):
    """A round that is not the one after the last completed round (nor a retry of it)."""


# Most specific first: most of these are ValueErrors too.
_STATUS_CODES: list[tuple[type[Exception], grpc.StatusCode]] = [
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (Forbidden, grpc.StatusCode.PERMISSION_DENIED),
    (SeatRefused, grpc.StatusCode.PERMISSION_DENIED),
    (UnknownSession, grpc.StatusCode.NOT_FOUND),
    (RequestTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (RunConflict, grpc.StatusCode.ALREADY_EXISTS),
    (RunNotActive, grpc.StatusCode.FAILED_PRECONDITION),
    (StaleLaunch, grpc.StatusCode.FAILED_PRECONDITION),
    (AnotherRunActive, grpc.StatusCode.FAILED_PRECONDITION),
    (RoundOutOfOrder, grpc.StatusCode.FAILED_PRECONDITION),
    (CannotIssue, grpc.StatusCode.FAILED_PRECONDITION),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
]

_Reply = TypeVar("_Reply")


class Admitting(Protocol):
    """A servicer whose RPCs ``admitted`` wraps: it knows whether callers must prove a role."""

    authenticate: bool


def admitted(method: Callable[[Any, Any, grpc.ServicerContext], _Reply]) -> Callable[..., _Reply]:
    """Admit the caller and the request's size, then run the RPC; errors become gRPC status
    codes whose details are the readable message."""
    rpc = method.__name__
    limit = REQUEST_LIMITS.get(rpc, MAX_REQUEST_BYTES)

    @functools.wraps(method)
    def handler(self: Admitting, request: Any, context: grpc.ServicerContext) -> _Reply:
        try:
            if self.authenticate:
                authorize(rpc, caller_identity(context))
            size = request.ByteSize()
            if size > limit:
                raise RequestTooLarge(f"{rpc} request of {size} bytes exceeds its limit, {limit}")
            return method(self, request, context)
        except Exception as error:
            for kind, code in _STATUS_CODES:
                if isinstance(error, kind):
                    context.abort(code, str(error))
            raise

    return handler


def check_launch(state: CoordinatorState, rpc: str, run_id: str, token: str) -> None:
    """The ServerApp's writes carry its launch's token; a stale one is kept as an event."""
    try:
        state.check_launch(run_id, token)
    except StaleLaunch as error:
        log.warning("%s refused: %s", rpc, error)
        state.record_event(run_id, "stale_writer", f"{rpc} refused: {error}", "error")
        raise
