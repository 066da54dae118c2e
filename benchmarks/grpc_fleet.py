"""Flower's gRPC-rere Fleet transport for a benchmark's federation, beside the REST one.

Flower 1.41 and 1.42 SuperNodes speak only protobuf over HTTP (``flwr/supernode/
fleet_http_connection.py``), and the SuperLink opens its gRPC-rere Fleet server only behind
the internal ``FLWR_INTERNAL_GRPC_FLEET_API=1``. To measure what gRPC would cost, this
module puts a gRPC stub where the SuperNode's HTTP client was (the same request and
response messages, the same signed node-identity metadata the SuperLink's
``NodeAuthServerInterceptor`` checks) and starts the daemons so that:

- the coordinator's SuperLink also serves gRPC-rere on ``GRPC_FLEET_ENV``'s address;
- each client's SuperNode dials that address straight, over TLS with the loopback
  SuperLink's CA (``SUPERLINK_CA_ENV``), bypassing the Fleet gateway.

Both transports start the coordinator through here, so that its threads carry their names
in /proc and the Fleet gateway's CPU can be read apart (``name_os_threads``). For
measurement only: nothing of collabfl uses this module.

    python benchmarks/grpc_fleet.py coordinator|client|supernode ARGS...
"""

from __future__ import annotations

import os
import sys
from base64 import b64decode
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

GRPC_FLEET_ENV = "COLLABFL_BENCH_GRPC_FLEET"
"""host:port of the SuperLink's gRPC-rere Fleet API."""
SUPERLINK_CA_ENV = "COLLABFL_BENCH_SUPERLINK_CA"
"""The loopback SuperLink's CA certificate (coordinator state dir, superlink_tls/ca.pem)."""


def grpc_fleet_client() -> type:
    """A stand-in for Flower's ``FleetHttpClient``: its methods call the Fleet gRPC stub."""
    import grpc
    from flwr.common.constant import PUBLIC_KEY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
    from flwr.proto.fleet_pb2_grpc import FleetStub
    from flwr.supercore.constant import (
        FLEET_HTTP_PUBLIC_KEY_HEADER,
        FLEET_HTTP_SIGNATURE_HEADER,
    )
    from flwr.supercore.grpc import GRPC_MAX_MESSAGE_LENGTH

    class GrpcFleetClient:
        def __init__(self, channel: grpc.Channel, sign: Callable[[], list[tuple[str, Any]]]):
            self._stub = FleetStub(channel)
            self._channel = channel
            self._sign = sign

        @classmethod
        @contextmanager
        def from_server_address(
            cls, server_address: str, insecure: bool, root_certificates: Any, interceptors: Any
        ) -> Iterator[GrpcFleetClient]:
            """Dial ``GRPC_FLEET_ENV`` (not the HTTP address) with the SuperLink's CA; sign
            each call as the HTTP interceptor would sign its headers."""
            del server_address, insecure, root_certificates
            auth = next(i for i in interceptors if hasattr(i, "_private_key"))
            with open(os.environ[SUPERLINK_CA_ENV], "rb") as ca:
                credentials = grpc.ssl_channel_credentials(ca.read())
            options = [
                ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_LENGTH),
                ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_LENGTH),
            ]
            channel = grpc.secure_channel(os.environ[GRPC_FLEET_ENV], credentials, options)

            def sign() -> list[tuple[str, Any]]:
                request = _Headers()
                auth.intercept(_Context(request), lambda context: None)
                return [
                    (PUBLIC_KEY_HEADER, b64decode(request.headers[FLEET_HTTP_PUBLIC_KEY_HEADER])),
                    (TIMESTAMP_HEADER, request.headers[TIMESTAMP_HEADER]),
                    (SIGNATURE_HEADER, b64decode(request.headers[FLEET_HTTP_SIGNATURE_HEADER])),
                ]

            try:
                yield cls(channel, sign)
            finally:
                channel.close()

        def __getattr__(self, method: str) -> Callable[[Any], Any]:
            call = getattr(self._stub, method)
            return lambda request: call(request, metadata=self._sign())

    return GrpcFleetClient


class _Headers:
    """What ``NodeAuthHttpInterceptor`` writes its signed headers into."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}


class _Context:
    def __init__(self, request: _Headers) -> None:
        self.request = request


def run_supernode(argv: list[str]) -> None:
    """Flower's SuperNode with the gRPC client in its HTTP client's place, and the daemon's
    short reply poll (collabfl/flower/quick_reply_supernode.py)."""
    import flwr.supernode.fleet_http_connection as connection

    from collabfl.flower import quick_reply_supernode

    connection.FleetHttpClient = grpc_fleet_client()  # type: ignore[misc]
    sys.argv = [quick_reply_supernode.FLOWER_ENTRY_POINT, *argv]
    quick_reply_supernode.main()


def run_client(argv: list[str]) -> int:
    """The client daemon, starting this module's SuperNode."""
    import collabfl.client.daemon as daemon
    from collabfl.flower.quick_reply_supernode import supernode_program

    plain = daemon.supernode_command

    def command(args: Any) -> list[str]:
        argv = plain(args)
        argv[argv.index("--root-certificates") + 1] = os.environ[SUPERLINK_CA_ENV]
        return [sys.executable, __file__, "supernode", *argv[len(supernode_program()) :]]

    daemon.supernode_command = command
    return daemon.main(argv)


def name_os_threads() -> None:
    """Give each Python thread started from now on its name in /proc (``comm``), so that
    a reader of /proc/PID/task can tell the Fleet gateway's thread from the others."""
    import ctypes
    import threading

    prctl = ctypes.CDLL(None).prctl
    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def named(thread: threading.Thread) -> None:
        prctl(15, thread.name.encode()[:15])  # PR_SET_NAME
        bootstrap(thread)

    threading.Thread._bootstrap_inner = named  # type: ignore[attr-defined]


def run_coordinator(argv: list[str]) -> int:
    """The coordinator daemon, its threads named; with ``GRPC_FLEET_ENV`` set its SuperLink
    also serves gRPC-rere Fleet there."""
    import collabfl.coordinator.daemon as daemon

    name_os_threads()
    if GRPC_FLEET_ENV in os.environ:
        plain = daemon.superlink_command
        os.environ["FLWR_INTERNAL_GRPC_FLEET_API"] = "1"

        def command(args: Any) -> list[str]:
            return [*plain(args), "--fleet-api-address", os.environ[GRPC_FLEET_ENV]]

        daemon.superlink_command = command
    return daemon.main(argv)


if __name__ == "__main__":
    role, rest = sys.argv[1], sys.argv[2:]
    if role == "supernode":
        run_supernode(rest)
    else:
        sys.exit((run_client if role == "client" else run_coordinator)(rest))
