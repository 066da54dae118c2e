"""The loopback SuperLink's Control API, called from the coordinator daemon's own process.

Registering a SuperNode key, removing one and listing the nodes are one Control API call
each. Through the ``flwr`` CLI each was a process that imports Flower first, about a
CPU-second; after an in-memory SuperLink restarts every member's key is registered again,
so that cost grew with the federation (16 keys took 19 s, while the Fleet gateway held the
SuperNodes' activations). Here they are calls on one HTTP client the daemon keeps.

The client is Flower's own (``ControlHttpClient``: the CLI's paths and messages) with the
headers the CLI sends: Flower's runtime version, which the SuperLink checks on every call,
and ``x-flwr-client``. Not the CLI's version interceptor: it exits the process on an
incompatible answer, where here that is a ``ControlError`` like any other refusal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from flwr.proto.control_pb2 import (
    ListNodesRequest,
    RegisterNodeRequest,
    UnregisterNodeRequest,
)
from flwr.proto.node_pb2 import NodeInfo
from flwr.supercore.constant import FLWR_CLIENT_METADATA_KEY
from flwr.supercore.control import ControlHttpClient
from flwr.supercore.protobuf.client import ProtobufCall, ProtobufRequestContext
from flwr.supercore.runtime_version_compatibility import RuntimeVersionMetadata

from collabfl.flower.supernode_key import supernode_key_pem

COMPONENT = "collabfl coordinator"
"""Who calls, as the SuperLink's runtime-version check and its logs read it."""
CLIENT_KIND = "cli"
"""The ``x-flwr-client`` value of ``flwr`` itself: these are the calls its commands make."""


class ControlError(RuntimeError):
    """The SuperLink refused a Control API call, or did not answer it."""


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
    """Register, unregister and list SuperNodes on the SuperLink at ``address``.

    ``root_certificate``: the loopback SuperLink's CA (None: it speaks plain HTTP, the
    insecure federation). Safe to share between threads (one httpx client).
    """

    def __init__(self, address: str, root_certificate: Path | None) -> None:
        self.address = address
        self._client = ControlHttpClient.from_server_address(
            server_address=address,
            insecure=root_certificate is None,
            root_certificates=None if root_certificate is None else root_certificate.read_bytes(),
            interceptors=[_CliHeaders()],
        )

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

    def _nodes_info(self) -> list[NodeInfo]:
        with self._refusals("list the SuperNodes"):
            return list(self._client.ListNodes(ListNodesRequest()).nodes_info)

    @contextmanager
    def _refusals(self, what: str) -> Iterator[None]:
        """Any failure of the call as a ControlError naming ``what`` and the SuperLink's
        reason."""
        try:
            yield
        except httpx.HTTPStatusError as error:
            raise ControlError(f"the SuperLink refused to {what}: {_reason(error)}") from None
        except (httpx.HTTPError, ValueError) as error:
            reason = f"{type(error).__name__}: {error}"
            raise ControlError(f"could not {what} at {self.address}: {reason}") from None


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
