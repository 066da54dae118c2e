"""The loopback SuperLink's Control API, called from the coordinator daemon's own process.

Registering a SuperNode key, removing one, listing the nodes, starting and stopping a Flower
run are one Control API call each, and following a run's ServerApp log one stream. Through
the ``flwr`` CLI each was a process that imports Flower first, about 1.5 CPU-seconds: after
an in-memory SuperLink restarts every member's key is registered again, so that cost grew
with the federation (16 keys took 19 s, while the Fleet gateway held the SuperNodes'
activations), and ``flwr run`` took 4.5 s of a run's launch on a loaded 2-core machine.
Here they are calls on one HTTP client the daemon keeps, and a client of its own per stream.

The client is Flower's own (``ControlHttpClient``: the CLI's paths and messages) with the
headers the CLI sends: Flower's runtime version, which the SuperLink checks on every call,
and ``x-flwr-client``. Not the CLI's version interceptor: it exits the process on an
incompatible answer, where here that is a ``ControlError`` like any other refusal.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from flwr.common.serde import user_config_to_proto
from flwr.proto.control_pb2 import (
    ListNodesRequest,
    RegisterNodeRequest,
    StartRunRequest,
    StopRunRequest,
    StreamLogsRequest,
    UnregisterNodeRequest,
)
from flwr.proto.fab_pb2 import Fab
from flwr.proto.node_pb2 import NodeInfo
from flwr.supercore.constant import FLWR_CLIENT_METADATA_KEY
from flwr.supercore.control import ControlHttpClient
from flwr.supercore.protobuf.client import (
    ProtobufCall,
    ProtobufClientInterceptor,
    ProtobufRequestContext,
)
from flwr.supercore.runtime_version_compatibility import RuntimeVersionMetadata

from collabfl.flower.supernode_key import supernode_key_pem

COMPONENT = "collabfl coordinator"
"""Who calls, as the SuperLink's runtime-version check and its logs read it."""
CLIENT_KIND = "cli"
"""The ``x-flwr-client`` value of ``flwr`` itself: these are the calls its commands make."""
NO_FEDERATION = ""
"""The federation a run is started in: the one our ``flwr`` connection names, none (the
SuperLink's default)."""


class ControlError(RuntimeError):
    """The SuperLink refused a Control API call, or did not answer it."""


class SuperLinkUnreachable(ControlError):
    """Nothing accepted the connection (the SuperLink is starting, or restarting): the call
    never reached it, so it may simply be made again."""


class _CliHeaders:
    """Adds to every call the headers ``flwr`` sends (its runtime version and client kind),
    and ``Connection: close``: the SuperLink waits for an idle keep-alive connection before
    it honours a SIGTERM (10 s, then the daemon's Supervisor kills it), and these calls are
    rare enough to open a connection each."""

    def __init__(self) -> None:
        version = RuntimeVersionMetadata.from_local_component(COMPONENT)
        self.headers = {
            **dict(version.as_metadata()),
            FLWR_CLIENT_METADATA_KEY: CLIENT_KIND,
            "connection": "close",
        }

    def intercept(self, context: ProtobufRequestContext, call_next: ProtobufCall) -> httpx.Response:
        context.request.headers.update(self.headers)
        return call_next(context)


class SuperLinkControl:
    """Register, unregister and list SuperNodes, start and stop Flower runs and stream their
    logs on the SuperLink at ``address``.

    ``root_certificate``: the loopback SuperLink's CA (None: it speaks plain HTTP, the
    insecure federation). Safe to share between threads (one httpx client).
    """

    def __init__(self, address: str, root_certificate: Path | None) -> None:
        self.address = address
        self.root_certificate = root_certificate
        self._client = _client(address, root_certificate, [_CliHeaders()])

    def close(self) -> None:
        self._client.close()

    def register(self, public_key: str) -> int:
        """Register an OpenSSH public key; the Flower node id it gets."""
        request = RegisterNodeRequest(public_key=_spki_pem(public_key))
        with self._refusals("register a SuperNode key"):
            reply = self._client.RegisterNode(request)
        if not reply.node_id:
            raise ControlError("the SuperLink registered the key but gave no node id")
        return int(reply.node_id)

    def unregister(self, node_id: int) -> None:
        """Remove node ``node_id``: its key no longer joins the Fleet API."""
        with self._refusals(f"unregister node {node_id}"):
            self._client.UnregisterNode(UnregisterNodeRequest(node_id=node_id))

    def nodes(self) -> list[dict[str, Any]]:
        """Every node the SuperLink knows, unregistered ones too, as ``flwr supernode list
        --format json`` describes one: ``node-id``, ``status`` (``registered``, ``online``,
        ``offline``, ``unregistered``), ``online-at`` and ``offline-at`` in UTC ("N/A": never).
        """
        return [
            {
                "node-id": str(node.node_id),
                "status": node.status,
                "online-at": _utc(node.last_activated_at),
                "offline-at": _utc(node.last_deactivated_at),
            }
            for node in self._nodes_info()
        ]

    def node_holding(self, public_key: str) -> int | None:
        """The node the SuperLink holds OpenSSH ``public_key`` under (registered, online or
        offline); None if it holds none."""
        wanted = _spki_pem(public_key)
        for node in self._nodes_info():
            if node.status != "unregistered" and node.public_key == wanted:
                return int(node.node_id)
        return None

    def start_run(self, fab: Fab, config: Mapping[str, str | int | float]) -> int:
        """Start a Flower run of the app ``fab`` (``app_fab``) with ``config`` over its run
        config's defaults, as ``flwr run <app> -c`` does; its Flower run id."""
        request = StartRunRequest(
            fab=fab, override_config=user_config_to_proto(dict(config)), federation=NO_FEDERATION
        )
        with self._refusals("start a Flower run"):
            reply = self._client.StartRun(request)
        if not reply.HasField("run_id"):
            raise ControlError("the SuperLink started no Flower run and gave no reason")
        return int(reply.run_id)

    def stop_run(self, run_id: int) -> None:
        """Stop Flower run ``run_id`` (refused once it has ended)."""
        with self._refusals(f"stop Flower run {run_id}"):
            reply = self._client.StopRun(StopRunRequest(run_id=run_id))
        if not reply.success:
            raise ControlError(f"the SuperLink did not stop Flower run {run_id}")

    def log_stream(self, run_id: int) -> LogStream:
        """Flower run ``run_id``'s ServerApp log, streamed on a client of its own."""
        return LogStream(self.address, self.root_certificate, run_id)

    def _nodes_info(self) -> list[NodeInfo]:
        with self._refusals("list the SuperNodes"):
            return list(self._client.ListNodes(ListNodesRequest()).nodes_info)

    def _refusals(self, what: str) -> AbstractContextManager[None]:
        return _refusals(self.address, what)


class LogStream:
    """A Flower run's ServerApp log from its start, as ``flwr log --stream`` prints it, until
    the run ends or ``close`` (from any thread) ends it.

    Flower's client reads a stream without a read timeout, so a run that logs nothing for
    minutes keeps its stream. The stream has a client of its own: ``close`` shuts its socket
    down, which wakes the thread blocked reading it (closing the socket would not).
    """

    def __init__(self, address: str, root_certificate: Path | None, run_id: int) -> None:
        self.address = address
        self.run_id = run_id
        self._lock = threading.Lock()
        self._response: httpx.Response | None = None
        self._closed = False
        self._client = _client(address, root_certificate, [_CliHeaders(), self])

    def __iter__(self) -> Iterator[str]:
        request = StreamLogsRequest(run_id=self.run_id, after_timestamp=0.0)
        try:
            with _refusals(self.address, f"stream the log of Flower run {self.run_id}"):
                for reply in self._client.StreamLogs(request):
                    yield reply.log_output
        finally:
            self._client.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            response = self._response
        if response is not None:
            _hang_up(response)

    def intercept(self, context: ProtobufRequestContext, call_next: ProtobufCall) -> httpx.Response:
        """Keep the stream's response, so that ``close`` can hang it up."""
        response = call_next(context)
        with self._lock:
            self._response = response
            closed = self._closed
        if closed:
            _hang_up(response)
        return response


def _client(
    address: str, root_certificate: Path | None, interceptors: list[ProtobufClientInterceptor]
) -> ControlHttpClient:
    return ControlHttpClient.from_server_address(
        server_address=address,
        insecure=root_certificate is None,
        root_certificates=None if root_certificate is None else root_certificate.read_bytes(),
        interceptors=interceptors,
    )


@contextmanager
def _refusals(address: str, what: str) -> Iterator[None]:
    """Any failure of a call to the SuperLink at ``address`` as a ControlError naming
    ``what`` and the SuperLink's reason."""
    try:
        yield
    except httpx.HTTPStatusError as error:
        raise ControlError(f"the SuperLink refused to {what}: {_reason(error)}") from None
    except httpx.ConnectError as error:
        raise SuperLinkUnreachable(f"could not {what} at {address}: {error}") from None
    except (httpx.HTTPError, ValueError) as error:
        reason = f"{type(error).__name__}: {error}"
        raise ControlError(f"could not {what} at {address}: {reason}") from None


def _hang_up(response: httpx.Response) -> None:
    """Shut down the socket ``response`` is read from: a read blocked on it returns at once.
    ``socket.socket.shutdown`` itself, not TLS's: that would tear down the TLS state the
    reading thread is in."""
    stream = response.extensions.get("network_stream")
    sock = None if stream is None else stream.get_extra_info("socket")
    if isinstance(sock, socket.socket):
        with suppress(OSError):  # already closed
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _reason(error: httpx.HTTPStatusError) -> str:
    """A refusal's reason: Flower's ``detail`` when its body has one, else the status."""
    response = error.response
    try:
        detail = json.loads(response.content).get("detail")
    except (ValueError, AttributeError):
        detail = None
    status = f"HTTP {response.status_code}"
    return f"{detail} ({status})" if isinstance(detail, str) and detail else status


def _spki_pem(public_key: str) -> bytes:
    """``supernode_key_pem``, refusing a key Flower cannot read with a ControlError."""
    try:
        return supernode_key_pem(public_key)
    except ValueError as error:
        raise ControlError(str(error)) from None


def _utc(timestamp: str) -> str:
    """One of Flower's ISO timestamps as ``flwr`` prints it ("2026-11-26 04:30:00Z")."""
    if not timestamp:
        return "N/A"
    moment = datetime.fromisoformat(timestamp).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")
