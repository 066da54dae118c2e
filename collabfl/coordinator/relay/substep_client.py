"""Typed clients of the sub-step relay (substeps.proto): the ServerApp's and a member's side.

Both turn gRPC failures into ``service_client``'s two exceptions: ``CoordinatorUnreachable``
(nothing answered) and ``CoordinatorError`` (the service said no, with a reason).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import grpc

from collabfl.coordinator.relay.substep_relay import Relayed, StepResult, Work
from collabfl.coordinator.service_client import CoordinatorError, CoordinatorUnreachable
from collabfl.coordinator.service_codec import MAX_STEP_BYTES, RELAY_CHANNEL_OPTIONS
from collabfl.kernel.tls import ClientTLS
from collabfl.proto import substeps_pb2 as pb
from collabfl.proto import substeps_pb2_grpc as pb_grpc

_Reply = TypeVar("_Reply")

CALL_SLACK_S = 10.0
"""How much longer than the wait it asked for a call may take before it counts as lost."""


class _RelayChannel:
    def __init__(self, address: str, tls: ClientTLS | None) -> None:
        self.address = address
        if tls is None:
            self._channel = grpc.insecure_channel(address, options=RELAY_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.secure_channel(address, tls.credentials(), RELAY_CHANNEL_OPTIONS)
        self._stub = pb_grpc.SubstepsStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> _RelayChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, rpc: Callable[..., _Reply], request: Any, timeout_s: float) -> _Reply:
        try:
            return rpc(request, timeout=timeout_s)
        except grpc.RpcError as error:
            code: grpc.StatusCode = error.code()
            details: str = error.details() or code.name
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise CoordinatorUnreachable(
                    f"the sub-step relay at {self.address}: {code.name.lower()} ({details})"
                ) from None
            raise CoordinatorError(code, details) from None


class SessionFeeder(_RelayChannel):
    """The ServerApp's side: open a run's session, relay steps to its clients, close it."""

    def __init__(
        self, address: str, run_id: str, launch_token: str, tls: ClientTLS | None = None
    ) -> None:
        super().__init__(address, tls)
        self.run_id = run_id
        self.launch_token = launch_token

    def _ref(self, session: str) -> pb.SessionRef:
        return pb.SessionRef(run_id=self.run_id, launch_token=self.launch_token, session=session)

    def open(self, session: str, tokens: Mapping[int, bytes]) -> None:
        request = pb.OpenSessionRequest(ref=self._ref(session), tokens=dict(tokens))
        self._call(self._stub.OpenSession, request, CALL_SLACK_S)

    def relay(
        self,
        session: str,
        work: Mapping[int, bytes],
        awaiting: Mapping[int, int],
        timeout_s: float,
    ) -> Relayed:
        """Hand each client in ``work`` its next step, then wait up to ``timeout_s`` for the
        results of those and of the steps in ``awaiting`` (client -> step). Steps go out in
        requests of at most MAX_STEP_BYTES, the last of which waits."""
        batches = _batches(work, MAX_STEP_BYTES)
        steps: dict[int, int] = {}
        results: dict[int, StepResult] = {}
        for n, batch in enumerate(batches):
            last = n == len(batches) - 1
            request = pb.RelayRequest(
                ref=self._ref(session),
                work=batch,
                awaiting=awaiting if last else {},
                timeout_s=timeout_s if last else 0.0,
            )
            reply = self._call(self._stub.Relay, request, request.timeout_s + CALL_SLACK_S)
            steps.update(reply.steps)
            results.update({k: StepResult(r.payload, r.error) for k, r in reply.results.items()})
        return Relayed(steps, results)

    def close_session(self, session: str) -> None:
        self._call(self._stub.CloseSession, self._ref(session), CALL_SLACK_S)


class SeatPoller(_RelayChannel):
    """A client's side: poll its seat for steps, posting each result with the next poll."""

    def __init__(
        self,
        address: str,
        run_id: str,
        session: str,
        client_id: int,
        token: bytes,
        tls: ClientTLS | None = None,
    ) -> None:
        super().__init__(address, tls)
        self.run_id = run_id
        self.session = session
        self.client_id = client_id
        self.token = token

    def poll(self, answered: int, result: StepResult | None, wait_s: float) -> Work:
        request = pb.PollRequest(
            run_id=self.run_id,
            session=self.session,
            client_id=self.client_id,
            token=self.token,
            answered=answered,
            wait_s=wait_s,
        )
        if result is not None:
            request.result.CopyFrom(pb.Result(payload=result.payload, error=result.error))
        reply = self._call(self._stub.Poll, request, wait_s + CALL_SLACK_S)
        return Work(reply.step, reply.work, reply.closed, reply.fed_ago_s)


def _batches(work: Mapping[int, bytes], max_bytes: int) -> list[dict[int, bytes]]:
    """``work`` in client order, split into requests of at most ``max_bytes`` of payload
    (a single larger step goes alone, and the service refuses it); always one at least."""
    batches: list[dict[int, bytes]] = [{}]
    size = 0
    for client in sorted(work):
        payload = work[client]
        if batches[-1] and size + len(payload) > max_bytes:
            batches.append({})
            size = 0
        batches[-1][client] = payload
        size += len(payload)
    return batches
