"""The Fleet gateway's client to the SuperLink (coordinator/gateway/upstream_http.py), against a raw
loopback HTTP server whose bytes the test writes: kept-alive connections are reused, a
connection the server closed while idle is replaced, chunked and sized bodies are read,
and each failure is the httpx error the gateway turns into its answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from collabfl.coordinator.gateway.upstream_http import UpstreamClient

SIZED = b"HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\ncontent-length: 5\r\n\r\nhello"
CHUNKED = (
    b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
)


class RawServer:
    """Answers each request with ``answer``; counts connections and requests; closes a
    connection after each answer when ``close_after`` is set."""

    def __init__(self, answer: bytes, close_after: bool = False, silent: bool = False) -> None:
        self.answer, self.close_after, self.silent = answer, close_after, silent
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = next(
                int(line.split(b":")[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length:")
            )
            self.requests.append(head + await reader.readexactly(length))
            if self.silent:
                await asyncio.sleep(60)
            writer.write(self.answer)
            await writer.drain()
            if self.close_after:
                break
        writer.close()


def run(server: RawServer, test: Callable[[UpstreamClient], Awaitable[None]]) -> None:
    async def main() -> None:
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        async with listening:
            await test(UpstreamClient(f"http://127.0.0.1:{port}", False, timeout_s=0.5))

    asyncio.run(main())


def test_kept_alive_connections_are_reused_and_headers_forwarded():
    server = RawServer(SIZED)

    async def test(client: UpstreamClient) -> None:
        for _ in range(3):
            response = await client.request(
                "POST",
                "/v1/fleet/pull-messages",
                b"body",
                [("x-signature", "s"), ("accept-encoding", "gzip")],
            )
            assert response.status_code == 200 and response.content == b"hello"
            assert response.headers["content-type"] == "application/protobuf"

    run(server, test)
    assert server.connections == 1 and len(server.requests) == 3
    first = server.requests[0].lower()
    assert first.startswith(b"post /v1/fleet/pull-messages http/1.1\r\n")
    assert b"x-signature: s\r\n" in first and first.endswith(b"\r\n\r\nbody")
    assert b"accept-encoding: identity\r\n" in first and b"gzip" not in first


def test_a_chunked_answer_is_read_whole():
    async def test(client: UpstreamClient) -> None:
        response = await client.request("POST", "/v1/fleet/push-object", b"", [])
        assert response.status_code == 201 and response.content == b"abcde"

    run(RawServer(CHUNKED), test)


def test_a_connection_the_server_closed_while_idle_is_replaced():
    server = RawServer(SIZED, close_after=True)

    async def test(client: UpstreamClient) -> None:
        for _ in range(3):
            assert (await client.request("POST", "/v1/fleet/x", b"", [])).content == b"hello"
            await asyncio.sleep(0.05)  # the server's close reaches the idle connection

    run(server, test)
    assert server.connections == 3


def test_an_upstream_that_does_not_answer_is_a_read_timeout():
    async def test(client: UpstreamClient) -> None:
        with pytest.raises(httpx.ReadTimeout):
            await client.request("POST", "/v1/fleet/x", b"", [])

    run(RawServer(SIZED, silent=True), test)


def test_a_broken_answer_is_a_transport_error():
    async def test(client: UpstreamClient) -> None:
        with pytest.raises(httpx.TransportError):
            await client.request("POST", "/v1/fleet/x", b"", [])

    run(RawServer(b"not http at all\r\n\r\n"), test)


def test_nobody_listening_is_a_connect_error(closed_port):
    client = UpstreamClient(f"http://127.0.0.1:{closed_port}", False, timeout_s=5)
    with pytest.raises(httpx.ConnectError):
        asyncio.run(client.request("POST", "/v1/fleet/x", b"", []))


def test_an_upstream_that_is_not_an_http_url_is_refused():
    with pytest.raises(ValueError, match="http"):
        UpstreamClient("unix:///tmp/superlink", False, timeout_s=5)
