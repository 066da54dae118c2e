"""Peer model exchange over real gRPC on loopback: a store, a server, a client source."""

from __future__ import annotations

import logging
import os
import time
from concurrent import futures

import grpc
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from collabfl.client.model_store import DiskModelStore, PublishedModels
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import CHUNK_BYTES, PeerModelServer
from collabfl.client.peers import InvalidPeerModel, PeerFetcher, PeerUnavailable
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.kernel.sealed import CLOCK_LEEWAY_S
from collabfl.proto import peer_pb2, peer_pb2_grpc

OWNER, FETCHER, ROUND, NUMEL = 3, 1, 4, 300_000  # 1.2 MB: the stream spans several chunks
RUN = "run"


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return generate_private_key()


@pytest.fixture
def signer(key) -> GrantSigner:
    return GrantSigner(key)


@pytest.fixture
def published(tmp_path) -> PublishedModels:
    return PublishedModels(tmp_path, owner=OWNER)


@pytest.fixture
def store(published) -> DiskModelStore:
    store = published.for_publishing(RUN)
    store.publish(OWNER, ROUND, torch.randn(NUMEL, generator=torch.Generator().manual_seed(0)))
    return store


@pytest.fixture
def address(published, store, signer):
    server = PeerModelServer(published, GrantVerifier(signer.public_key_bytes()))
    port = server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def source_for(address: str, grant: bytes | None, **overrides) -> GrpcPeerSource:
    settings = dict(expected_numel=NUMEL, max_bytes=8 * NUMEL, timeout_s=5.0) | overrides
    grants = {} if grant is None else {OWNER: grant}
    return GrpcPeerSource({OWNER: address}, grants, **settings, run=RUN)


def test_fetch_returns_the_published_model(store, signer, address):
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    with source_for(address, grant) as source:
        assert torch.equal(source.fetch(OWNER, ROUND), store.load(ROUND))
        assert torch.equal(source.fetch(OWNER, ROUND), store.load(ROUND))  # channel reused
        assert len(source._channels) == 1


def test_manifest_reports_the_stored_file(store, signer, address):
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    with grpc.insecure_channel(address) as channel:
        stub = peer_pb2_grpc.PeerModelsStub(channel)
        request = peer_pb2.FetchRequest(owner=OWNER, round=ROUND, grant=grant, run=RUN)
        chunks = list(stub.FetchModel(request, timeout=5))
    manifest = chunks[0].manifest
    with store.open_round(ROUND) as published:
        assert manifest.weights_blake3 == published.stored.weights_digest
    assert manifest.byte_size == store.path(ROUND).stat().st_size
    assert (manifest.owner, manifest.round) == (OWNER, ROUND)
    full, rest = divmod(manifest.byte_size, CHUNK_BYTES)
    assert [len(c.data) for c in chunks] == [CHUNK_BYTES] * full + [rest]
    assert [c.offset for c in chunks] == [n * CHUNK_BYTES for n in range(full + 1)]
    assert [c.HasField("manifest") for c in chunks] == [True] + [False] * full  # the first only


def test_health_needs_no_grant_and_tells_an_anonymous_caller_only_liveness(address):
    with grpc.insecure_channel(address) as channel:
        stub = peer_pb2_grpc.PeerModelsStub(channel)
        reply = stub.Health(peer_pb2.HealthRequest(run=RUN), timeout=5)
    assert (reply.owner, reply.status) == (OWNER, "SERVING")
    assert not reply.HasField("latest_round")  # progress is for authenticated members only


def test_health_of_an_empty_store(tmp_path):
    server = PeerModelServer(PublishedModels(tmp_path, owner=OWNER), verifier=None)
    port = server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = peer_pb2_grpc.PeerModelsStub(channel)
            reply = stub.Health(peer_pb2.HealthRequest(), timeout=5)
    finally:
        server.stop(None)
    assert not reply.HasField("latest_round")


def grant_cases(key: Ed25519PrivateKey) -> dict[str, tuple[bytes | None, str]]:
    signer, other = GrantSigner(key), GrantSigner(generate_private_key())
    long_ago = GrantSigner(key, clock=lambda: time.time() - CLOCK_LEEWAY_S - 60)
    return {
        "missing": (b"", "no grant presented"),
        "forged": (other.issue("run", FETCHER, OWNER, ROUND, 30), "bad signature"),
        "expired": (long_ago.issue("run", FETCHER, OWNER, ROUND, 30), "expired"),
        "other-owner": (signer.issue("run", FETCHER, OWNER + 1, ROUND, 30), "for owner"),
        "other-round": (signer.issue("run", FETCHER, OWNER, ROUND - 1, 30), "for round"),
        "other-run": (signer.issue("run-a", FETCHER, OWNER, ROUND, 30), "for run 'run-a'"),
    }


@pytest.mark.parametrize(
    "case", ["missing", "forged", "expired", "other-owner", "other-round", "other-run"]
)
def test_bad_grants_are_refused(key, address, case, caplog):
    token, reason = grant_cases(key)[case]
    with (
        source_for(address, token) as source,
        caplog.at_level(logging.WARNING),
        pytest.raises(PeerUnavailable, match=f"PERMISSION_DENIED: .*{reason}"),
    ):
        source.fetch(OWNER, ROUND)
    assert f"client {OWNER} refused FetchModel of round {ROUND} (run {RUN!r})" in caplog.text


def test_fetch_stream_also_checks_the_grant(address):
    with grpc.insecure_channel(address) as channel:
        stub = peer_pb2_grpc.PeerModelsStub(channel)
        request = peer_pb2.FetchRequest(owner=OWNER, round=ROUND, grant=b"nope", run=RUN)
        with pytest.raises(grpc.RpcError) as error:
            list(stub.FetchModel(request, timeout=5))
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_unknown_round_is_unavailable(signer, address):
    """A round before the latest published one that is not there will never come."""
    grant = signer.issue("run", FETCHER, OWNER, ROUND - 1, ttl_s=30)
    with source_for(address, grant) as source, pytest.raises(PeerUnavailable, match="NOT_FOUND"):
        source.fetch(OWNER, ROUND - 1)


def test_no_grant_or_address_fails_without_a_call(address):
    with source_for(address, None) as source:
        with pytest.raises(PeerUnavailable, match="no grant"):
            source.fetch(OWNER, ROUND)
        with pytest.raises(PeerUnavailable, match="no address"):
            source.fetch(OWNER + 1, ROUND)


def test_connection_refused_is_unavailable(signer, closed_port):
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    started = time.monotonic()
    with (
        source_for(f"127.0.0.1:{closed_port}", grant) as source,
        pytest.raises(PeerUnavailable, match="UNAVAILABLE"),
    ):
        source.fetch(OWNER, ROUND)
    assert time.monotonic() - started < 3


def test_oversized_model_is_refused_before_transfer(signer, address):
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    with (
        source_for(address, grant, max_bytes=4 * NUMEL) as source,
        pytest.raises(InvalidPeerModel, match="exceeds the limit"),
    ):
        source.fetch(OWNER, ROUND)


def test_wrong_length_model_is_refused(signer, address):
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    with (
        source_for(address, grant, expected_numel=NUMEL - 1) as source,
        pytest.raises(InvalidPeerModel, match="lists tensors"),
    ):
        source.fetch(OWNER, ROUND)


def test_corrupted_file_fails_the_digest(store, signer, address):
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    path = store.path(ROUND)
    stat = path.stat()
    with path.open("r+b") as file:
        file.seek(-4, 2)
        file.write(b"\xff\xff\xff\xff")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # bit rot keeps the mtime
    with source_for(address, grant) as source, pytest.raises(InvalidPeerModel, match="BLAKE3"):
        source.fetch(OWNER, ROUND)


def test_damage_the_server_no_longer_checks_is_caught_by_the_fetcher(
    published, store, signer, address
):
    """Once a file passed the server's check, its later serves skip the hash: rot the owner's
    disk hides from the file's metadata is then refused by the fetcher's own digest check."""
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    with source_for(address, grant) as source:
        assert torch.equal(source.fetch(OWNER, ROUND), store.load(ROUND))
        path = store.path(ROUND)
        with path.open("r+b") as file:
            file.seek(-4, os.SEEK_END)
            file.write(b"\xff\xff\xff\xff")
        with published.for_serving(RUN).open_round(ROUND) as damaged:
            published.verified.add(damaged.identity)  # as if the rot left no trace in stat
        with pytest.raises(InvalidPeerModel, match="BLAKE3 of the tensor bytes does not match"):
            source.fetch(OWNER, ROUND)


def test_nan_weights_never_reach_the_aggregate(tmp_path, signer):
    published = PublishedModels(tmp_path, owner=OWNER)
    published.for_publishing(RUN).publish(OWNER, ROUND, torch.tensor([1.0, float("nan"), 2.0]))
    server = PeerModelServer(published, GrantVerifier(signer.public_key_bytes()))
    address = f"127.0.0.1:{server.start()}"
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    try:
        with source_for(address, grant, expected_numel=3) as source:
            fetcher = PeerFetcher(source, expected_numel=3)
            with fetcher.hold([OWNER], ROUND, limit=1) as models:
                assert models == {}
    finally:
        server.stop(None)
    stats = fetcher.take_stats()
    assert (stats.failures, stats.models_fetched) == (1, 0)


def test_grpc_source_feeds_the_fetcher(store, signer, address):
    grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
    with source_for(address, grant) as source:
        fetcher = PeerFetcher(source, expected_numel=NUMEL)
        with fetcher.hold([OWNER], ROUND, limit=1) as models:
            assert torch.equal(models[OWNER], store.load(ROUND))
    assert fetcher.take_stats().bytes_fetched == 4 * NUMEL


def test_a_lying_peers_error_text_is_written_out_before_it_is_logged(signer):
    """A peer's status details become the fetcher's log line and a ``peer_skipped`` event
    the operator reads in a terminal: escape sequences in them are shown, not obeyed."""

    def refuse(request, context):
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "no\x1b[2J\x1b]52;c;aGk=\x07")

    handler = grpc.method_handlers_generic_handler(
        "collabfl.peer.PeerModels", {"FetchModel": grpc.unary_stream_rpc_method_handler(refuse)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        grant = signer.issue("run", FETCHER, OWNER, ROUND, ttl_s=30)
        with (
            source_for(f"127.0.0.1:{port}", grant) as source,
            pytest.raises(PeerUnavailable) as refused,
        ):
            source.fetch(OWNER, ROUND)
    finally:
        server.stop(None)
    assert "PERMISSION_DENIED: no\\x1b[2J\\x1b]52;c;aGk=\\x07" in str(refused.value)
    assert "\x1b" not in str(refused.value)
