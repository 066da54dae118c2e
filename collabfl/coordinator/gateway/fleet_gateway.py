"""The coordinator's public Flower endpoint: the Fleet API, and nothing else.

A Flower 1.41 SuperLink serves the Fleet API (SuperNodes), the Control API (``flwr run``,
``flwr stop``, SuperNode registration) and the Runtime API (ServerApps) on one HTTP port,
and the open-source Control API has no account authentication. So the SuperLink listens on
loopback only, where the coordinator daemon alone uses the Control and Runtime APIs, and
this gateway faces the network: it terminates TLS with the coordinator's certificate and
forwards ``POST /v1/fleet/<call>`` and ``GET /health`` to the SuperLink; every other
request gets 403 without reaching it. A stolen CA certificate, or a member's key, still
cannot submit a ServerApp or read a run from another host.

The SuperLink behind it speaks TLS too (Flower requires TLS for SuperNode authentication),
with a loopback-only certificate from a throwaway CA of its own (``LoopbackTLS``).

The gateway also holds a SuperNode's empty pull (``LongPoll``). A Flower 1.41 SuperNode
sleeps a fixed 3 s after every pull that brings no message, so a message pushed just after
a pull waited up to 3 s, three times per DPFL round. Here an empty pull is asked again on
loopback when the ServerApp says it pushed messages (the ``messages`` doorbell of
coordinator/gateway/doorbell.py, rung through the coordinator service), and at growing intervals
in case a signal is lost, until a message arrives or the hold ends; its 3 s sleep comes
only after a hold of ``hold_s`` with nothing to do. The answer the SuperNode gets is the
SuperLink's own, unchanged. A SuperNode's reply rings the ``replies`` doorbell, which the
ServerApp waits on instead of polling the SuperLink, once the SuperLink holds all of it: the
push of the message, then of each object the SuperLink asked for (``ReplyContent``).

It holds a pull of a message's object that is not there yet the same way. The SuperLink
hands out a message as soon as its sender has pushed the message itself, before its objects
(the content) follow; a SuperNode that asks in between backs off a fixed 1 s, then 2 s.
Here that answer is asked again, every 5 to 50 ms, until the object is there.

Anyone who reaches the port is served before any authentication (Flower checks a SuperNode's
signature in the SuperLink), so the gateway bounds what a stranger can make it hold
(``GatewayLimits``): a request body beyond the largest Fleet call is refused with 413 while
it streams in, before it is buffered; on every route, the enrolment calls too, one peer
address holds a bounded number of connections, and a request's headers and body each have
a deadline (coordinator/gateway/public_protocol.py); the joins in flight have a bound of their own
(coordinator/gateway/join_endpoint.py), far below uvicorn's, so that joins never take the
SuperNodes' share; a connection idle after a response is closed; uvicorn's
``limit_concurrency`` bounds the rest.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import httpx
import uvicorn
from flwr.common.constant import (
    FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE,
    SYSTEM_TIME_TOLERANCE,
    TIMESTAMP_HEADER,
    TIMESTAMP_TOLERANCE,
)
from flwr.proto.fleet_pb2 import PullMessagesResponse, PushMessagesResponse
from flwr.proto.message_pb2 import PullObjectResponse, PushObjectRequest
from flwr.supercore.error.base import ApiErrorCode
from google.protobuf.message import DecodeError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.gateway.join_endpoint import JoinEndpoint, with_enrolment
from collabfl.coordinator.gateway.public_protocol import public_protocol
from collabfl.coordinator.gateway.upstream_http import UpstreamClient
from collabfl.kernel.identity import Identity, Role
from collabfl.kernel.pki import issue, make_ca, write_certificate, write_private_key

log = logging.getLogger(__name__)

FLEET_PATH = re.compile(r"/v1/fleet/[a-z][a-z-]{0,63}")
"""A Fleet call, spelled plainly: no dots, slashes or escapes that could be normalised
into another API on the way to the SuperLink."""
HEALTH_PATH = "/health"
PULL_PATH = "/v1/fleet/pull-messages"
PULL_OBJECT_PATH = "/v1/fleet/pull-object"
PUSH_PATH = "/v1/fleet/push-messages"
PUSH_OBJECT_PATH = "/v1/fleet/push-object"
ACTIVATE_PATH = "/v1/fleet/activate-node"
PROTOBUF = "application/protobuf"
UPSTREAM_TIMEOUT_S = 300.0
"""A Fleet call carries at most one message chunk; far longer means the SuperLink hangs."""
UPSTREAM_START_S, UPSTREAM_RETRY_S = 10.0, 0.05
"""How long a Fleet call waits, asking again every ``UPSTREAM_RETRY_S``, for a SuperLink
that does not listen yet (it starts beside the SuperNodes, or restarts). A SuperNode whose
call is refused backs off for a second, then two, four...; held, it joins the moment the
SuperLink is up. With a pull's hold after it, still below the SuperNode's 30 s timeout."""

_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
    }
)
"""Headers that describe one hop, not the call: each side sets its own."""
_AUTH_FAILED = "Invalid SuperNode authentication"
"""The SuperLink's own words for a refused signature (flwr/superlink/routers/fleet)."""


@dataclass(frozen=True)
class LongPoll:
    """How long an empty pull is held, and how often it is asked again meanwhile.

    ``hold_s`` stays well below the SuperNode's 30 s HTTP timeout. The interval starts at
    ``first_s`` and grows by ``growth`` up to ``max_s``. A pull the ``messages`` doorbell
    wakes is asked again at once, so the intervals only bound the wait when a signal is lost
    (the ServerApp could not reach the coordinator service: it logs a warning) and set what
    an idle node costs the SuperLink: six pulls per hold, 0.4 a second (at 0.25 s growing
    to 1 s it was 18, and a pull costs the SuperLink about as much CPU as a round's message).
    """

    hold_s: float = 15.0
    first_s: float = 1.0
    max_s: float = 4.0
    growth: float = 2.0

    def intervals(self) -> list[float]:
        """The waits between asks, in order, adding up to about ``hold_s``."""
        waits, wait, total = [], self.first_s, 0.0
        while total < self.hold_s:
            waits.append(wait)
            total += wait
            wait = min(wait * self.growth, self.max_s)
        return waits


MAX_FLEET_BODY = 4 * FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE
"""The largest Fleet call is a PushObject of one array chunk (Flower splits arrays into
chunks of at most 5 MiB; a PushMessages carries only the messages' object trees); four
times that leaves room for protobuf framing and large config records."""


@dataclass(frozen=True)
class GatewayLimits:
    """What a peer can make the gateway hold before it is authenticated.

    ``max_body_bytes``: a request body beyond it gets 413. ``per_peer``: connections one
    peer address may hold open, on every route (a SuperNode has at most three: a held pull, a
    push, a heartbeat; all SuperNodes behind one NAT share it); one more is closed at once.
    ``max_concurrency``: connections and requests of all peers together (uvicorn's
    ``limit_concurrency``: 503 beyond). ``header_timeout_s``: how long a connection may take
    to send a request's headers. ``body_timeout_s``: how long a request's body may take after
    its headers (a Fleet call's largest, 20 MiB, at 3 Mbit/s).
    ``max_header_bytes``: a request whose headers pass it gets 400.
    ``idle_s``: how long a connection may sit idle after a response.
    """

    max_body_bytes: int = MAX_FLEET_BODY
    per_peer: int = 64
    max_concurrency: int = 4096
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_header_bytes: int = 64 << 10
    idle_s: int = 30

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "per_peer", "max_concurrency", "max_header_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("header_timeout_s", "body_timeout_s", "idle_s"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


class BodyTooLarge(Exception):
    """A request body beyond ``GatewayLimits.max_body_bytes``."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, read as it streams in; BodyTooLarge as soon as it passes
    ``limit`` (at once when its declared length does), so no more than ``limit`` bytes
    are ever held."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge
    return bytes(body)


RefusedActivation = Callable[[bytes, int, str], None]
"""Told of each ``activate-node`` call the SuperLink refused: the request's body, the
answer's status and text (coordinator/gateway/activation_refusals.py records it)."""


FleetAnswer = TypeVar("FleetAnswer", PullMessagesResponse, PullObjectResponse, PushMessagesResponse)

OBJECT_WAIT = LongPoll(hold_s=10.0, first_s=0.005, max_s=0.05)
"""A message's objects follow it within milliseconds: a hold runs out only when their
sender died mid-push, and then the SuperNode's own retries take over."""


MAX_PENDING_REPLIES = 4096
"""Replies whose objects ``ReplyContent`` waits for at most; far more than SuperNodes push at
once (one reply each), so only a flood of pushes that never complete reaches it."""


class ReplyContent:
    """Rings the ``replies`` doorbell when a pushed reply is complete on the SuperLink.

    A SuperNode pushes its reply message first, then each object the SuperLink's answer
    names (``objects_to_push``), one call each. Rung at the message, the ServerApp pulled
    it before its content and asked for each missing object again, every 5 ms: a SuperLink
    request each time. A reply still waiting when ``limit`` others are is dropped and rung
    (its puller asks, as before); one whose objects never all arrive costs the ServerApp
    its one-second fallback wait (apps/fleet_signals.py). The event loop's thread alone
    calls it.
    """

    def __init__(self, ring: Callable[[], None], limit: int = MAX_PENDING_REPLIES) -> None:
        self.ring = ring
        self.limit = limit
        self._missing: dict[int, set[str]] = {}
        """Per reply waiting (in the order pushed), the objects not pushed yet."""
        self._waiting_for: dict[str, set[int]] = {}
        """Per object, the replies waiting for it."""
        self._pushed = 0

    def message_pushed(self, objects: Iterable[str]) -> None:
        """A reply's message was stored; ``objects`` are those the SuperLink still needs."""
        missing = set(objects)
        if not missing:
            self.ring()
            return
        if len(self._missing) >= self.limit:
            self._forget(next(iter(self._missing)))
            self.ring()
        self._pushed += 1
        self._missing[self._pushed] = missing
        for object_id in missing:
            self._waiting_for.setdefault(object_id, set()).add(self._pushed)

    def object_pushed(self, object_id: str) -> None:
        """An object was stored: ring for each reply it completes."""
        for reply in self._waiting_for.pop(object_id, ()):
            missing = self._missing[reply]
            missing.discard(object_id)
            if not missing:
                del self._missing[reply]
                self.ring()

    def waiting(self) -> bool:
        return bool(self._missing)

    def _forget(self, reply: int) -> None:
        for object_id in self._missing.pop(reply):
            replies = self._waiting_for[object_id]
            replies.discard(reply)
            if not replies:
                del self._waiting_for[object_id]


def is_empty_pull(response: httpx.Response) -> bool:
    """Whether a pull's answer carries no message (and could be asked again)."""
    answer = _protobuf_answer(response, PullMessagesResponse)
    return answer is not None and not answer.messages_list


def is_object_not_there_yet(response: httpx.Response) -> bool:
    """Whether an object pull's answer says the object is known but its content has not
    been pushed yet (and could be asked again)."""
    answer = _protobuf_answer(response, PullObjectResponse)
    return answer is not None and answer.object_found and not answer.object_available


def _protobuf_answer(response: httpx.Response, kind: type[FleetAnswer]) -> FleetAnswer | None:
    """The answer decoded, if it is a successful protobuf one. A refusal (an
    unauthenticated SuperNode's 401, say) is None and goes back at once, as does anything
    this gateway cannot read."""
    content_type = response.headers.get("content-type", "")
    if response.status_code != 200 or not content_type.startswith(PROTOBUF):
        return None
    try:
        return kind.FromString(response.content)
    except DecodeError:
        return None


def clock_skew(timestamp: str | None, now: float) -> str | None:
    """Why the SuperLink will refuse a call signed at ``timestamp`` (Flower's header), naming
    the signer's clock offset; None when Flower accepts it or cannot read it either.

    Flower's SuperLink accepts a signature made at most SYSTEM_TIME_TOLERANCE (5 s) ahead of
    its clock and TIMESTAMP_TOLERANCE + SYSTEM_TIME_TOLERANCE (305 s) behind it, and answers
    anything else with a bare 401 that its SuperNode reports as "Client error '401
    Unauthorized'": nothing in it says that the clock is the cause.
    """
    try:
        signed_at = datetime.fromisoformat(timestamp or "")
    except ValueError:
        return None
    if signed_at.tzinfo is None:
        return None
    age = now - signed_at.timestamp()
    behind_s = TIMESTAMP_TOLERANCE + SYSTEM_TIME_TOLERANCE
    if -SYSTEM_TIME_TOLERANCE < age < behind_s:
        return None
    offset = f"{-age:.0f} s ahead of" if age < 0 else f"{age:.0f} s behind"
    return (
        f"this SuperNode's clock is {offset} the coordinator's; Flower accepts at most "
        f"{SYSTEM_TIME_TOLERANCE} s ahead and {behind_s} s behind"
    )


def forwarded(method: str, path: str) -> bool:
    """Whether a request reaches the SuperLink: Fleet calls and the health check only."""
    if method == "POST":
        return FLEET_PATH.fullmatch(path) is not None
    return method == "GET" and path == HEALTH_PATH


class FleetOnlyProxy:
    """ASGI app forwarding allowed requests to the loopback SuperLink; 403 for the rest."""

    def __init__(
        self,
        upstream: str,
        verify: ssl.SSLContext | bool,
        long_poll: LongPoll = LongPoll(),
        object_wait: LongPoll = OBJECT_WAIT,
        activity: FleetActivity | None = None,
        start_wait_s: float = UPSTREAM_START_S,
        limits: GatewayLimits = GatewayLimits(),
        on_refused_activation: RefusedActivation | None = None,
        clock: Callable[[], float] = time.time,
        keys_ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.upstream = upstream
        self.keys_ready = keys_ready
        """False while a restarted SuperLink is being given the SuperNode keys again
        (coordinator/superlink/supernode_restore.py): activations wait, up to ``start_wait_s``."""
        self.verify = verify
        self.long_poll = long_poll
        self.object_wait = object_wait
        self.activity = activity or FleetActivity()
        self.start_wait_s = start_wait_s
        self.limits = limits
        self.on_refused_activation = on_refused_activation
        self.clock = clock
        self.reply_content = ReplyContent(self.activity.replies.ring)
        self.client: UpstreamClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan, no websockets: the client is made on first use
        request = Request(scope, receive)
        if not forwarded(request.method, request.url.path):
            log.warning(
                "fleet gateway: refused %s %s from %s",
                request.method, request.url.path, request.client,
            )  # fmt: skip
            refusal = PlainTextResponse("only the Flower Fleet API is served here", 403)
            await refusal(scope, receive, send)
            return
        try:
            response = await self._forward(request)
        except BodyTooLarge:
            log.warning("fleet gateway: refused a body over %d bytes from %s",
                        self.limits.max_body_bytes, request.client)  # fmt: skip
            too_large = f"a Fleet call carries at most {self.limits.max_body_bytes} bytes"
            response = _closing(PlainTextResponse(too_large, 413))
        except ClientDisconnect:
            return  # gone before its body was in (or dropped at the body deadline)
        await response(scope, receive, send)

    def _hold(self, path: str) -> tuple[list[float], Callable[[httpx.Response], bool]]:
        """How a call to ``path`` is held: the waits between asks, and which answer means
        "not yet". Calls other than the two pulls go through once."""
        if path == PULL_PATH:
            return self.long_poll.intervals(), is_empty_pull
        if path == PULL_OBJECT_PATH:
            return self.object_wait.intervals(), is_object_not_there_yet
        return [], lambda response: False

    async def _forward(self, request: Request) -> Response:
        if self.client is None:
            self.client = UpstreamClient(self.upstream, self.verify, UPSTREAM_TIMEOUT_S)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS]
        body = await read_body(request, self.limits.max_body_bytes)
        path = request.url.path
        if skew := clock_skew(request.headers.get(TIMESTAMP_HEADER), self.clock()):
            log.warning("fleet gateway: refused %s from %s: %s", path, request.client, skew)
            # The SuperLink's answer, with the reason where a SuperNode prints it (a Flower
            # error's public details); not an activation refusal's event: the key is fine.
            code = int(ApiErrorCode.FLEET_NODE_ACTIVATION_FAILED)
            return JSONResponse({"code": code, "detail": _AUTH_FAILED, "extra": skew}, 401)
        waits, not_yet = self._hold(path)
        pushed = self.activity.messages
        seen = pushed.count  # before the first ask: a push during it is not missed
        # The health check says how the SuperLink is now; only Fleet calls wait for it.
        start_wait_s = self.start_wait_s if request.method == "POST" else 0.0
        if path == ACTIVATE_PATH:
            await self._await_keys(request, start_wait_s)
        try:
            upstream = await self._ask(request, body, headers, start_wait_s)
            for wait in waits:
                if not not_yet(upstream) or await request.is_disconnected():
                    break
                if path == PULL_PATH:
                    seen = await pushed.wait_async(seen, wait)
                else:
                    await asyncio.sleep(wait)
                # The same signed request again: node authentication signs a timestamp
                # that stays valid for minutes, far longer than a hold.
                upstream = await self._ask(request, body, headers, start_wait_s=0.0)
        except httpx.TransportError as error:
            log.warning("fleet gateway: SuperLink unreachable: %s", error)
            return PlainTextResponse("the SuperLink is not answering", 503)
        if upstream.status_code == 200:
            self._note_reply_progress(path, body, upstream)
        if path == ACTIVATE_PATH and upstream.status_code != 200:
            await self._report_refusal(body, upstream)
        kept = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
        return Response(upstream.content, upstream.status_code, headers=kept)

    def _note_reply_progress(self, path: str, body: bytes, upstream: httpx.Response) -> None:
        """Tell ``reply_content`` of a stored reply message or object. An answer this
        gateway cannot read rings at once: the ServerApp's pull then finds out."""
        if path == PUSH_PATH:
            answer = _protobuf_answer(upstream, PushMessagesResponse)
            self.reply_content.message_pushed(answer.objects_to_push if answer is not None else ())
        elif path == PUSH_OBJECT_PATH and self.reply_content.waiting():
            try:
                object_id = PushObjectRequest.FromString(body).object_id
            except DecodeError:
                return  # the SuperLink stored nothing it could not read either
            self.reply_content.object_pushed(object_id)

    async def _await_keys(self, request: Request, wait_s: float) -> None:
        """Hold an activation while the SuperLink is being given the keys again, so that a
        SuperNode joins when its key is back rather than being refused and backing off."""
        deadline = time.monotonic() + wait_s
        while not self.keys_ready() and time.monotonic() < deadline:
            if await request.is_disconnected():
                return
            await asyncio.sleep(UPSTREAM_RETRY_S)

    async def _report_refusal(self, body: bytes, upstream: httpx.Response) -> None:
        """Tell ``on_refused_activation`` of a refused activation, off the event loop; a
        failure to record it never changes the SuperNode's answer."""
        if self.on_refused_activation is None:
            return
        try:
            await asyncio.to_thread(
                self.on_refused_activation, body, upstream.status_code, upstream.text
            )
        except Exception:
            log.exception("fleet gateway: recording a refused activation failed")

    async def _ask(
        self, request: Request, body: bytes, headers: list[tuple[str, str]], start_wait_s: float
    ) -> httpx.Response:
        """Forward once; while the SuperLink refuses connections, ask again for up to
        ``start_wait_s`` (``UPSTREAM_START_S`` says why)."""
        assert self.client is not None
        deadline = time.monotonic() + start_wait_s
        while True:
            try:
                return await self.client.request(
                    request.method, request.url.path, content=body, headers=headers
                )
            except httpx.ConnectError:
                if time.monotonic() >= deadline or await request.is_disconnected():
                    raise
                await asyncio.sleep(UPSTREAM_RETRY_S)


def _closing(response: Response) -> Response:
    """``response``, after which the connection is closed: what is left of the refused
    request's body is not read."""
    response.headers["connection"] = "close"
    return response


@dataclass(frozen=True)
class GatewayTLS:
    """The certificate the gateway shows the network (the coordinator's own)."""

    certfile: Path
    keyfile: Path


class FleetGateway:
    """Serves ``FleetOnlyProxy`` with uvicorn on a thread of the coordinator daemon."""

    def __init__(
        self,
        host: str,
        port: int,
        upstream: str,
        upstream_ca: Path | None,
        tls: GatewayTLS | None,
        long_poll: LongPoll = LongPoll(),
        object_wait: LongPoll = OBJECT_WAIT,
        activity: FleetActivity | None = None,
        enrolment: JoinEndpoint | None = None,
        limits: GatewayLimits = GatewayLimits(),
        on_refused_activation: RefusedActivation | None = None,
        keys_ready: Callable[[], bool] = lambda: True,
    ) -> None:
        verify: ssl.SSLContext | bool = False
        if upstream_ca is not None:
            verify = ssl.create_default_context(cafile=str(upstream_ca))
        proxy = FleetOnlyProxy(
            upstream, verify, long_poll, object_wait, activity, limits=limits,
            on_refused_activation=on_refused_activation, keys_ready=keys_ready,
        )  # fmt: skip
        config = uvicorn.Config(
            with_enrolment(proxy, enrolment),
            host=host,
            port=port,
            http=public_protocol(limits.header_timeout_s, limits.body_timeout_s, limits.per_peer),
            limit_concurrency=limits.max_concurrency,
            h11_max_incomplete_event_size=limits.max_header_bytes,
            proxy_headers=False,  # no proxy in front: a caller's X-Forwarded-For is its own
            timeout_keep_alive=limits.idle_s,
            lifespan="off",
            log_level="warning",
            access_log=False,
            ssl_certfile=str(tls.certfile) if tls else None,
            ssl_keyfile=str(tls.keyfile) if tls else None,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="fleet-gateway", daemon=True)

    def start(self, timeout_s: float = 30.0) -> int:
        """Start serving; returns the bound port (useful when asked for port 0)."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the Fleet gateway did not start (is the port in use?)")
            time.sleep(0.05)
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@dataclass(frozen=True)
class LoopbackTLS:
    """TLS files of the loopback SuperLink: a CA that signs nothing else, and its cert."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def ensure(cls, folder: Path) -> LoopbackTLS:
        """The files in ``folder``, made on first use; the CA key is never kept."""
        files = cls(folder / "ca.pem", folder / "superlink.pem", folder / "superlink.key")
        if all(path.exists() for path in (files.ca, files.cert, files.key)):
            return files
        folder.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = make_ca(days=3650)
        identity = Identity(Role.COORDINATOR, "loopback-superlink")
        key, cert = issue(identity, ["127.0.0.1", "localhost"], ca_key, ca_cert, days=3650)
        write_private_key(key, files.key)
        write_certificate(cert, files.cert)
        write_certificate(ca_cert, files.ca)
        return files
