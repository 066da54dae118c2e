"""The enrolment endpoint on the coordinator's public port, beside the Fleet API.

Three calls under ``/collabfl/v1/``, served by the Fleet gateway
(coordinator/gateway/fleet_gateway.py) over its TLS, with no client certificate required:

- ``GET ca``: the federation CA, which a joining machine checks against its token's pin
  before it trusts anything else;
- ``POST join``: a join token, a CSR and a member's SuperNode key (JSON, at most
  ``MAX_JOIN_BODY`` bytes), answered with the certificate, CA, grant key and where the
  service is (coordinator/enrolment/enrolment.py);
- ``GET revoked``: the revoked certificate serials and the runs that ended within a ticket's
  lifetime (with how and when; named by their id's hash, kernel/tickets.py ``run_key``),
  which every client daemon asks for again every little while, so that its peer server
  refuses the certificates and its ClientApp the tickets.

Nothing else is reachable through it: every other path under the prefix is 404, and the
body of a join is read only up to its limit. At most ``MAX_JOINS_IN_FLIGHT`` joins are served
at once, ``MAX_JOINS_PER_ADDRESS`` of them from one address (coordinator/gateway/join_slots.py; 503
with ``Retry-After`` beyond, which a joining machine waits out): joins run one at a time
(coordinator/enrolment/enrolment.py), each on a worker thread, so more would only hold connections
and threads that SuperNodes need. The port's per-address bound and header and
body deadlines (coordinator/gateway/public_protocol.py) apply here as on the Fleet API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from collabfl.coordinator.enrolment.enrolment import (
    Enroller,
    EnrolmentUnavailable,
    JoinRefused,
    JoinRequest,
    TooManyAttempts,
)
from collabfl.coordinator.gateway.join_slots import JoinSlots
from collabfl.kernel.tickets import RunEnd, published_run_ends

PREFIX = "/collabfl/v1/"
CA_PATH, JOIN_PATH, REVOKED_PATH = PREFIX + "ca", PREFIX + "join", PREFIX + "revoked"
MAX_JOIN_BODY = 64 * 1024
"""A join carries a token, a CSR and a public key: a few kilobytes."""
RETRY_AFTER_S = 2


class BodyTooLarge(ValueError):
    pass


class JoinEndpoint:
    """ASGI app for the calls under ``PREFIX``."""

    def __init__(
        self,
        enroller: Enroller,
        ended_runs: Callable[[], Mapping[str, RunEnd]] = dict,
        slots: JoinSlots | None = None,
    ) -> None:
        self.enroller = enroller
        self.ended_runs = ended_runs
        self.slots = slots or JoinSlots()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await self._answer(request)
        except ClientDisconnect:
            return  # gone before its body was in (or dropped at the body deadline)
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        route = (request.method, request.url.path)
        if route == ("GET", CA_PATH):
            return PlainTextResponse(
                self.enroller.ca_pem.decode(), media_type="application/x-pem-file"
            )
        if route == ("GET", REVOKED_PATH):
            ended = await asyncio.to_thread(self.ended_runs)
            return JSONResponse(
                {
                    "serials": self.enroller.revoked_serials(),
                    "ended_runs": published_run_ends(ended),
                }
            )
        if route == ("POST", JOIN_PATH):
            address = request.client.host if request.client is not None else "unknown"
            busy = self.slots.take(address)
            if busy is not None:
                headers = {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"}
                return PlainTextResponse(busy, 503, headers=headers)
            try:
                return await self._join(request, address)
            finally:
                self.slots.give_back(address)
        return PlainTextResponse("not found", 404)

    async def _join(self, request: Request, address: str) -> Response:
        try:
            body = await read_body(request, MAX_JOIN_BODY)
            join = JoinRequest.from_json(json.loads(body))
        except BodyTooLarge as error:
            return PlainTextResponse(str(error), 413)
        except ValueError as error:  # JSONDecodeError is one
            return PlainTextResponse(f"malformed join request: {error}", 400)
        except RecursionError:
            return PlainTextResponse("malformed join request: JSON nested too deep", 400)
        try:
            reply = await asyncio.to_thread(self.enroller.join, address, join)
        except TooManyAttempts as error:
            return PlainTextResponse(str(error), 429)
        except EnrolmentUnavailable as error:
            return PlainTextResponse(str(error), 503, headers={"Retry-After": "2"})
        except JoinRefused as error:
            return PlainTextResponse(str(error), 403)
        return JSONResponse(reply.to_json())


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refusing it (``BodyTooLarge``) as soon as it exceeds ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes exceeds {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def with_enrolment(fleet: ASGIApp, endpoint: JoinEndpoint | None) -> ASGIApp:
    """``fleet``, with the calls under ``PREFIX`` going to ``endpoint`` (when there is one)."""
    if endpoint is None:
        return fleet

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            await endpoint(scope, receive, send)
        else:
            await fleet(scope, receive, send)

    return route
