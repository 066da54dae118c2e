"""The gRPC server a client daemon runs so that authorised peers can fetch its models.

It serves the files of a ``DiskModelStore`` as they are: the manifest describes a round's
safetensors file, the fetch streams it from disk in chunks of at most 1 MiB, so serving a
model never needs it in memory. Both model calls require a grant for this owner and round,
signed by the coordinator; refusals are logged and answered with PERMISSION_DENIED.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from typing import NoReturn

import grpc

from collabfl.client.model_store import DiskModelStore
from collabfl.kernel.grants import GrantVerifier, InvalidGrant
from collabfl.kernel.tls import ServerTLS
from collabfl.proto import peer_pb2, peer_pb2_grpc

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
MAX_REQUEST_BYTES = 64 * 1024
"""Requests are tiny (ids and a grant); anything bigger is refused by gRPC itself."""


class PeerModelService(peer_pb2_grpc.PeerModelsServicer):
    """The PeerModels RPCs over one store.

    ``verifier=None`` turns grant checks off: only for tests and setups where every caller
    that can reach the port is trusted anyway.
    """

    def __init__(self, store: DiskModelStore, verifier: GrantVerifier | None) -> None:
        self.store = store
        self.verifier = verifier

    def GetManifest(
        self, request: peer_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> peer_pb2.Manifest:
        self._authorise("GetManifest", request, context)
        try:
            stored = self.store.describe(request.round)
        except FileNotFoundError:
            self._refuse(
                "GetManifest", request, context, grpc.StatusCode.NOT_FOUND, "no such round"
            )
        manifest = peer_pb2.Manifest(
            owner=self.store.owner,
            round=stored.round,
            tensors=[
                peer_pb2.TensorInfo(name=t.name, shape=t.shape, dtype=t.dtype)
                for t in stored.tensors
            ],
            byte_size=stored.byte_size,
            sha256=stored.sha256,
        )
        if stored.num_samples is not None:
            manifest.num_samples = stored.num_samples
        return manifest

    def FetchModel(
        self, request: peer_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> Iterator[peer_pb2.Chunk]:
        self._authorise("FetchModel", request, context)
        try:
            # Opened before streaming: a prune during the transfer cannot cut it short.
            file = self.store.path(request.round).open("rb")
        except FileNotFoundError:
            self._refuse("FetchModel", request, context, grpc.StatusCode.NOT_FOUND, "no such round")
        with file:
            offset = 0
            while data := file.read(CHUNK_BYTES):
                yield peer_pb2.Chunk(data=data, offset=offset)
                offset += len(data)

    def Health(
        self, request: peer_pb2.HealthRequest, context: grpc.ServicerContext
    ) -> peer_pb2.HealthReply:
        reply = peer_pb2.HealthReply(owner=self.store.owner, status="SERVING")
        latest = self.store.latest_round()
        if latest is not None:
            reply.latest_round = latest
        return reply

    def _authorise(
        self, method: str, request: peer_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> None:
        """Abort unless the request carries a valid grant for this owner and round.

        The grant is checked before anything else so that an unauthorised caller learns
        nothing, not even which rounds exist.
        """
        if self.verifier is not None:
            try:
                grant = self.verifier.verify(
                    request.grant, owner=self.store.owner, round=request.round
                )
            except InvalidGrant as error:
                self._refuse(
                    method, request, context, grpc.StatusCode.PERMISSION_DENIED, str(error)
                )
            log.debug(
                "%s: client %s fetches round %s (run %s)",
                method,
                grant.fetcher,
                grant.round,
                grant.run,
            )
        if request.owner != self.store.owner:
            reason = f"this peer serves client {self.store.owner}, not {request.owner}"
            self._refuse(method, request, context, grpc.StatusCode.NOT_FOUND, reason)
        if request.round < 0:
            self._refuse(method, request, context, grpc.StatusCode.NOT_FOUND, "negative round")

    def _refuse(
        self,
        method: str,
        request: peer_pb2.FetchRequest,
        context: grpc.ServicerContext,
        code: grpc.StatusCode,
        reason: str,
    ) -> NoReturn:
        """Log the refusal and end the call with ``code`` (context.abort raises)."""
        log.warning(
            "client %s refused %s of round %s to %s: %s: %s",
            self.store.owner,
            method,
            request.round,
            context.peer(),
            code.name,
            reason,
        )
        context.abort(code, reason)
        raise AssertionError("context.abort returned")  # it raises; this keeps typing honest


class PeerModelServer:
    """Runs ``PeerModelService`` on ``address``, over TLS when ``tls`` is given."""

    def __init__(
        self,
        store: DiskModelStore,
        verifier: GrantVerifier | None,
        address: str = "127.0.0.1:0",
        tls: ServerTLS | None = None,
        max_workers: int = 8,
    ) -> None:
        if verifier is None:
            log.warning("peer server for client %s runs WITHOUT grant checks", store.owner)
        self.address = address
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="peer-server"),
            options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
        )
        peer_pb2_grpc.add_PeerModelsServicer_to_server(
            PeerModelService(store, verifier), self._server
        )
        self._tls = tls

    def start(self) -> int:
        """Bind and start serving; returns the bound port (useful with port 0)."""
        if self._tls is None:
            port = self._server.add_insecure_port(self.address)
        else:
            port = self._server.add_secure_port(self.address, self._tls.credentials())
        if port == 0:
            raise OSError(f"could not bind the peer server to {self.address}")
        self._server.start()
        return port

    def stop(self, grace: float | None = None) -> None:
        """Stop serving; in-flight calls get ``grace`` seconds to finish (None: cancel now)."""
        self._server.stop(grace).wait()
