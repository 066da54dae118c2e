"""The gRPC server a client daemon runs so that authorised peers can fetch its models.

It serves the files of this owner's ``PublishedModels`` as they are: a fetch streams a run's
round file from disk in chunks of ``CHUNK_BYTES``, the first carrying the manifest, so serving
a model never needs it in memory. A fetch requires a grant signed by the coordinator for
this owner, the run and round asked for and, over TLS, for the member whose certificate the
caller presented: a grant is useless to anyone but its fetcher. Over TLS the server demands
a client certificate from the federation's CA (mutual TLS). A file whose weights no longer
match the digest recorded at publish fails before its last chunk the first time it is served;
later serves of the unchanged file skip that hash (the fetcher checks the digest end to end).
Refusals are logged.

The owner publishes from another process (the ClientApp) into the same folder, so a fetch of
a round later than any published yet waits for its file (polling, up to the publish wait and
the caller's deadline) in the stream slot it was admitted to; the grant is checked first.
Such a wait ends at once when the owner has joined another launch of the run than the one
the fetch names (the coordinator restarted and relaunched the run, which starts over from its
last completed round): the fetch's round will not come from that launch.

Health answers liveness (owner, status) to anyone who can reach the port, because probes
and operators need it and the owner is named in the server's certificate anyway; the latest
published round of a run, which tells how far a participant got, only to an authenticated
member.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent import futures
from typing import NoReturn

import grpc

from collabfl.client.chunk_wire import encode_chunk
from collabfl.client.model_store import (
    CorruptModel,
    DiskModelStore,
    PublishedModels,
    PublishedRound,
    StoredModel,
)
from collabfl.client.stream_limits import BUSY_KEY, SPARE_THREADS, Stream, StreamGuard, StreamLimits
from collabfl.kernel.grants import GrantVerifier, InvalidGrant
from collabfl.kernel.identity import Role, caller_identity
from collabfl.kernel.tls import ServerTLS
from collabfl.proto import peer_pb2, peer_pb2_grpc

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 * 1024
"""Chosen by measurement (benchmarks/peer_fetch.py, loaded 2-core machine): 512 KiB and
1 MiB chunks fetched 10-100 MB models ~15-25% faster, but a 1 MB fetch was slower and the
fetcher's peak extra memory rose from 3.3x to 4.2x the model at 1 MB and from 1.5x to 1.8x
at 10 MB (gRPC buffers more of larger messages); 128 KiB cost ~8% and 64 KiB ~25% of
the 10 MB throughput. Clients accept chunks up to 1 MiB."""
MAX_REQUEST_BYTES = 64 * 1024
"""Requests are tiny (ids and a grant); anything bigger is refused by gRPC itself."""
ANONYMOUS = -1
"""The stream-slot key of callers nobody identified (no TLS and no grant checks)."""
PUBLISH_POLL_S = 0.02
"""How often a waiting fetch looks for its round's file (one stat call)."""


class PeerModelService(peer_pb2_grpc.PeerModelsServicer):
    """The PeerModels RPCs over one owner's published models.

    ``verifier=None`` turns grant checks off: only for tests and setups where every caller
    that can reach the port is trusted anyway. ``authenticated`` says the link is mutual
    TLS, so every caller has a certificate whose identity grants are checked against.
    """

    def __init__(
        self,
        models: PublishedModels,
        verifier: GrantVerifier | None,
        guard: StreamGuard,
        authenticated: bool,
    ) -> None:
        self.models = models
        self.verifier = verifier
        self.guard = guard
        self.authenticated = authenticated

    @property
    def owner(self) -> int:
        return self.models.owner

    # The generated servicer yields Chunk messages; this one yields them already serialised
    # (registered without a response serializer in ``add_to_server`` below).
    def FetchModel(  # type: ignore[override]
        self, request: peer_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        """Serialised ``Chunk`` messages (chunk_wire: the file's bytes copied once)."""
        fetcher, store = self._authorise(request, context)
        stream = self.guard.admit(fetcher, context)
        if stream is None:
            reason = f"too many concurrent model streams (client {fetcher} or all fetchers)"
            context.set_trailing_metadata(((BUSY_KEY, "1"),))
            # Back-pressure, not a fault: the fetcher asks again. A 32-client round 0 gave
            # 578 of these; as warnings they buried the refusals that are one.
            self._refuse(request, context, grpc.StatusCode.RESOURCE_EXHAUSTED, reason, logging.INFO)
        # Checked while streamed from one handle: a prune or republish cannot cut it short.
        with self._open(request, context, store, stream) as published:
            manifest: peer_pb2.Manifest | None = _manifest(self.owner, published.stored)
            offset = 0
            try:
                for data in published.chunks(CHUNK_BYTES):
                    yield encode_chunk(data, offset, manifest)
                    stream.progress()  # the reader took the previous chunk
                    manifest = None
                    offset += len(data)
            except CorruptModel as error:
                self._refuse(request, context, grpc.StatusCode.DATA_LOSS, str(error))

    def Health(
        self, request: peer_pb2.HealthRequest, context: grpc.ServicerContext
    ) -> peer_pb2.HealthReply:
        reply = peer_pb2.HealthReply(owner=self.owner, status="SERVING")
        caller = caller_identity(context) if self.authenticated else None
        if caller is None or caller.role is not Role.MEMBER or not request.run:
            return reply
        store = self.models.for_serving(request.run)
        latest = store.latest_round() if store is not None else None
        if latest is not None:
            reply.latest_round = latest
        return reply

    def _authorise(
        self, request: peer_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> tuple[int, DiskModelStore]:
        """The fetcher's client id and the run's store, or abort.

        The caller's certificate and the grant are checked before anything else so that an
        unauthorised caller learns nothing, not even which runs or rounds exist.
        """
        fetcher = self._authenticate(request, context)
        if self.verifier is not None:
            try:
                grant = self.verifier.verify(
                    request.grant,
                    run=request.run,
                    owner=self.owner,
                    round=request.round,
                    fetcher=fetcher,
                )
            except InvalidGrant as error:
                self._refuse(request, context, grpc.StatusCode.PERMISSION_DENIED, str(error))
            fetcher = grant.fetcher
            log.debug(
                "client %s fetches round %s of run %s",
                fetcher,
                request.round,
                request.run,
            )
        if request.owner != self.owner:
            reason = f"this peer serves client {self.owner}, not {request.owner}"
            self._refuse(request, context, grpc.StatusCode.NOT_FOUND, reason)
        if request.round < 0:
            self._refuse(request, context, grpc.StatusCode.NOT_FOUND, "negative round")
        store = self.models.for_serving(request.run)
        if store is None:
            self._refuse(request, context, grpc.StatusCode.NOT_FOUND, "no such run")
        return (ANONYMOUS if fetcher is None else fetcher), store

    def _open(
        self,
        request: peer_pb2.FetchRequest,
        context: grpc.ServicerContext,
        store: DiskModelStore,
        stream: Stream,
    ) -> PublishedRound:
        """The round's file, waited for while it may still be published, or abort.

        A round at or before the latest published one that is not there (pruned, or never
        published by an owner that went on) fails at once.
        """
        wait_s = self.guard.limits.publish_wait_s
        remaining = context.time_remaining()
        if remaining is not None:  # never past the caller's deadline
            wait_s = min(wait_s, remaining)
        until = time.monotonic() + wait_s
        stream.wait_until(until)
        while True:
            # Asked before the open: a round published between a failed open and this
            # question would otherwise look like one that never comes.
            awaited = store.awaits(request.round)
            try:
                published = store.open_round(request.round)
            except FileNotFoundError:
                if not awaited:
                    self._refuse(request, context, grpc.StatusCode.NOT_FOUND, "no such round")
                joined = store.launch() if request.launch else None  # a read per poll
                if joined is not None and joined != request.launch:
                    reason = (
                        f"client {self.owner} joined another launch of run {request.run!r} "
                        f"({joined}, not {request.launch}): round {request.round} of the "
                        "fetcher's launch will not come"
                    )
                    self._refuse(request, context, grpc.StatusCode.ABORTED, reason)
                left = until - time.monotonic()
                if left <= 0:
                    reason = f"round {request.round} was not published within {wait_s:.3g} s"
                    self._refuse(request, context, grpc.StatusCode.NOT_FOUND, reason)
                if not context.is_active():  # the caller gave up or the server is stopping
                    context.abort(grpc.StatusCode.CANCELLED, "the call ended while waiting")
                time.sleep(min(PUBLISH_POLL_S, left))
                continue
            except CorruptModel as error:
                self._refuse(request, context, grpc.StatusCode.DATA_LOSS, str(error))
            stream.progress()
            return published

    def _authenticate(
        self, request: peer_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> int | None:
        """The caller's client id from its certificate; None on an unauthenticated link."""
        if not self.authenticated:
            return None
        caller = caller_identity(context)
        if caller is None or caller.client_id is None:
            reason = f"a member certificate is required, the caller is {caller or 'anonymous'}"
            self._refuse(request, context, grpc.StatusCode.PERMISSION_DENIED, reason)
        return caller.client_id

    def _refuse(
        self,
        request: peer_pb2.FetchRequest,
        context: grpc.ServicerContext,
        code: grpc.StatusCode,
        reason: str,
        level: int = logging.WARNING,
    ) -> NoReturn:
        """Log the refusal and end the call with ``code`` (context.abort raises)."""
        log.log(
            level,
            "client %s refused FetchModel of round %s (run %r) to %s: %s: %s",
            self.owner,
            request.round,
            request.run,
            context.peer(),
            code.name,
            reason,
        )
        context.abort(code, reason)
        raise AssertionError("context.abort returned")  # it raises; this keeps typing honest


def _manifest(owner: int, stored: StoredModel) -> peer_pb2.Manifest:
    manifest = peer_pb2.Manifest(
        owner=owner,
        round=stored.round,
        tensors=[
            peer_pb2.TensorInfo(name=t.name, shape=t.shape, dtype=t.dtype) for t in stored.tensors
        ],
        byte_size=stored.byte_size,
        weights_blake3=stored.weights_digest,
    )
    if stored.num_samples is not None:
        manifest.num_samples = stored.num_samples
    return manifest


def _handlers(service: PeerModelService) -> grpc.GenericRpcHandler:
    """peer.proto's service, its FetchModel sending the bytes ``FetchModel`` serialised."""
    return grpc.method_handlers_generic_handler(
        "collabfl.peer.PeerModels",
        {
            "FetchModel": grpc.unary_stream_rpc_method_handler(
                service.FetchModel, request_deserializer=peer_pb2.FetchRequest.FromString
            ),
            "Health": grpc.unary_unary_rpc_method_handler(
                service.Health,
                request_deserializer=peer_pb2.HealthRequest.FromString,
                response_serializer=peer_pb2.HealthReply.SerializeToString,
            ),
        },
    )


class PeerModelServer:
    """Runs ``PeerModelService`` on ``address``; over mutual TLS when ``tls`` is given."""

    def __init__(
        self,
        models: PublishedModels,
        verifier: GrantVerifier | None,
        address: str = "127.0.0.1:0",
        tls: ServerTLS | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        if tls is not None and tls.client_ca is None:
            raise ValueError("the peer server needs mutual TLS: give it the CA of members")
        if verifier is None:
            log.warning("peer server for client %s runs WITHOUT grant checks", models.owner)
        if tls is None:
            log.warning(
                "peer server for client %s runs WITHOUT TLS: grants are bearer tokens and "
                "callers are not authenticated (loopback and tests only)",
                models.owner,
            )
        limits = limits or StreamLimits()
        self.address = address
        self._guard = StreamGuard(limits)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=limits.max_streams + SPARE_THREADS, thread_name_prefix="peer-server"
            ),
            options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
        )
        service = PeerModelService(models, verifier, self._guard, authenticated=tls is not None)
        self._server.add_generic_rpc_handlers((_handlers(service),))
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
        self._guard.stop()
