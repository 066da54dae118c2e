"""The HTTP protocol of the coordinator's public port: what one connection may hold.

Every route of the port (the Fleet API, ``GET /health`` and the enrolment calls) is served
by uvicorn's h11 protocol with three deadlines and one bound added here, below any ASGI
app, so that no route can bypass them:

- a connection whose request headers are not all in within ``header_timeout_s`` of its
  opening or of its previous response is closed (a slowloris, or a connection that never
  asks anything; uvicorn's keep-alive timeout stops at the first byte);
- a request whose body is not all in within ``body_timeout_s`` of its headers is dropped,
  connection and all (a slow body held a join open for as long as its sender liked);
- one peer address may hold at most ``per_peer`` connections: one more is closed as soon
  as it is accepted, before it can count against uvicorn's ``limit_concurrency``, which
  4,200 slow joins from one address once filled, so that ``/health`` and every SuperNode
  got 503. HTTP/1.1 serves one request at a time per connection, so this also bounds the
  requests one address has in flight.

Not httptools, which uvicorn prefers when installed: its protocol keeps every header line
of a request with no size limit (60 MB of headers sent within the deadline grew the process
by 67 MiB), where h11 refuses a request whose headers pass ``max_header_bytes``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr

log = logging.getLogger(__name__)


class PublicH11(H11Protocol):
    """uvicorn's h11 protocol with the public port's deadlines and per-address bound.

    The class attributes are set per server by ``public_protocol``; ``open_per_peer`` is
    shared by that server's connections and touched by its event loop's thread alone.
    ``cycle`` is the request being served (None before the first)."""

    header_timeout_s: ClassVar[float]
    body_timeout_s: ClassVar[float]
    per_peer: ClassVar[int]
    open_per_peer: ClassVar[Counter[str]]
    warned: ClassVar[set[str]]
    peer: str | None = None
    """This connection's address, once it counts against the bound (None if refused)."""
    header_deadline: asyncio.TimerHandle | None = None
    body_deadline: asyncio.TimerHandle | None = None
    body_of: object | None = None
    """The request whose body ``body_deadline`` waits for."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = get_remote_addr(transport)
        peer = address[0] if address else ""
        if self.open_per_peer[peer] >= self.per_peer:
            if peer not in self.warned:  # once until it drops below: a flood logs one line
                self.warned.add(peer)
                log.warning(
                    "public port: %s has %d connections open, the most one address may "
                    "(--fleet-per-peer); closing more",
                    peer, self.per_peer,
                )  # fmt: skip
            transport.close()
            return
        self.peer = peer
        self.open_per_peer[peer] += 1
        self._arm_headers()

    def data_received(self, data: bytes) -> None:
        if self._between_requests():
            self._arm_headers()  # the next request's headers are due
        super().data_received(data)
        if not self._between_requests():
            self._disarm_headers()
        self._watch_body()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_body()  # a pipelined request may have begun without new data

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_headers()
        self._disarm_body()
        if self.peer is not None:
            self.open_per_peer[self.peer] -= 1
            if self.open_per_peer[self.peer] < self.per_peer:
                self.warned.discard(self.peer)
            if not self.open_per_peer[self.peer]:
                del self.open_per_peer[self.peer]
            self.peer = None
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_headers(self) -> None:
        if self.header_deadline is None:
            self.header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm_headers(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _headers_late(self) -> None:
        self.header_deadline = None
        if self._between_requests() and not self.transport.is_closing():
            log.info("public port: closed %s: no request headers in %s s", self.client,
                     self.header_timeout_s)  # fmt: skip
            self.transport.close()

    def _awaiting_body(self) -> bool:
        return self.cycle is not None and self.cycle.more_body and not self.cycle.response_complete

    def _watch_body(self) -> None:
        """Arm the body deadline once per request whose body is still coming; disarm it
        once the body is in."""
        if not self._awaiting_body():
            self._disarm_body()
        elif self.body_of is not self.cycle:
            self._disarm_body()
            self.body_of = self.cycle
            self.body_deadline = self.loop.call_later(self.body_timeout_s, self._body_late)

    def _disarm_body(self) -> None:
        if self.body_deadline is not None:
            self.body_deadline.cancel()
            self.body_deadline = None
        self.body_of = None

    def _body_late(self) -> None:
        self.body_deadline = None
        if self._awaiting_body() and not self.transport.is_closing():
            log.info("public port: dropped %s %s from %s: its body was not in after %s s",
                     self.cycle.scope["method"], self.cycle.scope["path"], self.client,
                     self.body_timeout_s)  # fmt: skip
            self.transport.close()


def public_protocol(
    header_timeout_s: float, body_timeout_s: float, per_peer: int
) -> type[asyncio.Protocol]:
    """``PublicH11`` for one server: its deadlines (seconds), its bound, its own counts."""
    settings = {
        "header_timeout_s": header_timeout_s,
        "body_timeout_s": body_timeout_s,
        "per_peer": per_peer,
        "open_per_peer": Counter(),
        "warned": set(),
    }
    return type("PublicH11", (PublicH11,), settings)
