"""The Fleet gateway's HTTP/1.1 client to the SuperLink on loopback.

Every Fleet call a SuperNode makes is forwarded once or more (coordinator/gateway/fleet_gateway.py),
so this client's cost is paid about twenty times per client and round. httpx spent most of
the gateway's CPU on its layers (auth, redirects, cookies, its connection pool's anyio
events) for one fixed upstream that needs none of them. This one keeps connections alive
and speaks HTTP/1.1 through h11, one request per connection at a time, and answers with an
``httpx.Response``; a failure raises httpx's transport errors, as the gateway expects. It asks
for bodies unencoded (the gateway passes them on as they are) and bounds nothing the trusted
SuperLink sends: the gateway's limits face the network.
"""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

import h11
import httpx

READ_SIZE = 1 << 16
MAX_IDLE = 64
"""Kept-alive connections at most; beyond, a finished one is closed."""


class Connection:
    """One kept-alive connection and its HTTP state."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.http = h11.Connection(h11.CLIENT)

    def reusable(self) -> bool:
        """Whether the server has not closed it while it was idle."""
        return not (self.reader.at_eof() or self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


class UpstreamClient:
    """Requests to one ``base_url`` (http or https), with ``request`` as httpx's."""

    def __init__(self, base_url: str, verify: ssl.SSLContext | bool, timeout_s: float) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"upstream must be an http(s) URL, got {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.authority = url.netloc
        self.tls: ssl.SSLContext | None = None
        if url.scheme == "https":
            self.tls = verify if isinstance(verify, ssl.SSLContext) else _unverified()
        self.timeout_s = timeout_s
        self._idle: list[Connection] = []

    async def request(
        self, method: str, path: str, content: bytes, headers: list[tuple[str, str]]
    ) -> httpx.Response:
        connection = await self._connection()
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._exchange(connection, method, path, content, headers)
        except TimeoutError as error:
            connection.close()
            raise httpx.ReadTimeout(f"no answer in {self.timeout_s} s") from error
        except (OSError, h11.ProtocolError) as error:
            connection.close()
            raise httpx.ReadError(f"the connection to {self.authority} failed: {error}") from error
        except BaseException:
            connection.close()  # cancelled mid-request: the connection's state is unknown
            raise
        self._release(connection)
        return response

    async def _connection(self) -> Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable():
                return connection
            connection.close()
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls, limit=READ_SIZE
            )
        except OSError as error:
            raise httpx.ConnectError(f"cannot connect to {self.authority}: {error}") from error
        return Connection(reader, writer)

    async def _exchange(
        self,
        connection: Connection,
        method: str,
        path: str,
        content: bytes,
        headers: list[tuple[str, str]],
    ) -> httpx.Response:
        http = connection.http
        head = [
            ("host", self.authority),
            ("content-length", str(len(content))),
            ("accept-encoding", "identity"),  # the body goes back as it came: never encoded
            *((k, v) for k, v in headers if k.lower() != "accept-encoding"),
        ]
        connection.writer.write(
            http.send(h11.Request(method=method, target=path, headers=head))
            + (http.send(h11.Data(data=content)) if content else b"")
            + http.send(h11.EndOfMessage())
        )
        await connection.writer.drain()
        answer: h11.Response | None = None
        body = bytearray()
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                http.receive_data(await connection.reader.read(READ_SIZE))
            elif isinstance(event, h11.Response):
                answer = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("the server closed the connection mid-answer")
        assert answer is not None  # h11 yields the head before any body
        raw = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in answer.headers]
        return httpx.Response(answer.status_code, headers=raw, content=bytes(body))

    def _release(self, connection: Connection) -> None:
        """Keep ``connection`` for the next request if both sides may go on with it."""
        http = connection.http
        if (
            http.our_state is h11.DONE
            and http.their_state is h11.DONE
            and len(self._idle) < MAX_IDLE
        ):
            http.start_next_cycle()
            self._idle.append(connection)
        else:
            connection.close()


def _unverified() -> ssl.SSLContext:
    """TLS without checking the certificate: only when the caller asked for no check."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
