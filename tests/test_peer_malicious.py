"""A peer that lies, cheats or dies: the client refuses it with the right error, quickly.

The fake peer below speaks the real protocol over real gRPC but serves whatever manifest
and chunks a test hands it (the manifest on the first chunk unless told otherwise), so each
way of breaking the contract can be tried alone.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import pytest
import torch
from safetensors.torch import save

from collabfl.client import background_hash
from collabfl.client.background_hash import weights_digest
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peers import InvalidPeerModel, PeerUnavailable
from collabfl.proto import peer_pb2, peer_pb2_grpc

OWNER, ROUND, NUMEL = 2, 5, 1000
MIB = 1 << 20


def payload_of(vector: torch.Tensor, owner: int = OWNER, round_index: int = ROUND) -> bytes:
    return save({"weights": vector}, metadata={"owner": str(owner), "round": str(round_index)})


def raw_payload(header: dict | bytes, data: bytes) -> bytes:
    """A hand-built safetensors file, so a test can make the header say anything."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def manifest_of(payload: bytes, numel: int = NUMEL, **changes) -> peer_pb2.Manifest:
    tensor_bytes = payload[8 + int.from_bytes(payload[:8], "little") :]
    fields = dict(
        owner=OWNER,
        round=ROUND,
        tensors=[peer_pb2.TensorInfo(name="weights", shape=[numel], dtype="F32")],
        byte_size=len(payload),
        weights_blake3=weights_digest(tensor_bytes),
    )
    return peer_pb2.Manifest(**(fields | changes))


def sha256_owner_manifest(payload: bytes) -> peer_pb2.Manifest:
    """The manifest an owner before BLAKE3 sent: the SHA-256 in field 5, no weights_blake3."""
    tensor_bytes = payload[8 + int.from_bytes(payload[:8], "little") :]
    sha256 = hashlib.sha256(tensor_bytes).hexdigest().encode()
    field_5 = bytes([5 << 3 | 2, len(sha256)]) + sha256
    raw = manifest_of(payload, weights_blake3="").SerializeToString() + field_5
    return peer_pb2.Manifest.FromString(raw)


def chunks_of(payload: bytes, size: int = MIB) -> list[peer_pb2.Chunk]:
    return [
        peer_pb2.Chunk(data=payload[at : at + size], offset=at)
        for at in range(0, len(payload), size)
    ]


@dataclass
class FakePeer(peer_pb2_grpc.PeerModelsServicer):
    """Serves a fixed manifest and chunk list; optionally misbehaves after chunk ``after``."""

    manifest: peer_pb2.Manifest
    chunks: list[peer_pb2.Chunk]
    after: int | None = None
    then: str = "abort"
    """What happens after chunk ``after``: "abort" the call or "stall" until released."""
    manifest_on: tuple[int, ...] = (0,)
    """The chunks that carry the manifest."""
    sent: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def FetchModel(self, request, context) -> Iterator[peer_pb2.Chunk]:
        for index, chunk in enumerate(self.chunks):
            if index in self.manifest_on:
                chunk = peer_pb2.Chunk(data=chunk.data, offset=chunk.offset, manifest=self.manifest)
            yield chunk
            if index == self.after:
                self.sent.set()
                if self.then == "abort":
                    context.abort(grpc.StatusCode.INTERNAL, "disk died")
                self.release.wait(10)
                return


@pytest.fixture
def serve():
    servers = []

    def start(peer: FakePeer) -> tuple[str, grpc.Server]:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        peer_pb2_grpc.add_PeerModelsServicer_to_server(peer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append((server, peer))
        return f"127.0.0.1:{port}", server

    yield start
    for server, peer in servers:
        peer.release.set()
        server.stop(None)


def fetch_from(address: str, numel: int = NUMEL, timeout_s: float = 5.0) -> torch.Tensor:
    with GrpcPeerSource(
        {OWNER: address},
        {OWNER: b"grant"},
        numel,
        max_bytes=16 * MIB,
        timeout_s=timeout_s,
        run="run",
    ) as source:
        return source.fetch(OWNER, ROUND)


def test_honest_fake_peer_is_accepted(serve):
    vector = torch.randn(NUMEL)
    payload = payload_of(vector)
    address, _ = serve(FakePeer(manifest_of(payload), chunks_of(payload, size=100)))
    assert torch.equal(fetch_from(address), vector)


def test_header_without_metadata_is_accepted(serve):
    vector = torch.randn(NUMEL)
    payload = save({"weights": vector})
    address, _ = serve(FakePeer(manifest_of(payload), chunks_of(payload)))
    assert torch.equal(fetch_from(address), vector)


GOOD = payload_of(torch.zeros(NUMEL))
ENTRY = {"dtype": "F32", "shape": [NUMEL], "data_offsets": [0, 4 * NUMEL]}
ZEROS = bytes(4 * NUMEL)


def flipped(payload: bytes) -> bytes:
    return payload[:-1] + bytes([payload[-1] ^ 1])


def bad_cases() -> dict[str, tuple[peer_pb2.Manifest, list[peer_pb2.Chunk], str]]:
    """name -> (manifest, chunks, expected message) for peers that must be refused."""

    def honest_manifest(payload: bytes, **changes):
        return manifest_of(payload, **changes), chunks_of(payload)

    gap = chunks_of(GOOD, size=1000)
    gap[1] = peer_pb2.Chunk(data=gap[1].data, offset=gap[1].offset + 1)
    huge_chunk = b"\0" * (MIB + 1)
    entry = json.dumps(ENTRY)
    cases = {
        "digest-mismatch": (manifest_of(GOOD), chunks_of(flipped(GOOD)), "BLAKE3"),
        "wrong-owner": (*honest_manifest(GOOD, owner=OWNER + 1), "is for peer"),
        "wrong-round": (*honest_manifest(GOOD, round=ROUND + 1), "is for peer"),
        "manifest-dtype": (
            *honest_manifest(
                GOOD, tensors=[peer_pb2.TensorInfo(name="weights", shape=[NUMEL], dtype="F64")]
            ),
            "lists tensors",
        ),
        "manifest-shape": (
            *honest_manifest(
                GOOD, tensors=[peer_pb2.TensorInfo(name="weights", shape=[10, 100], dtype="F32")]
            ),
            "lists tensors",
        ),
        "manifest-two-tensors": (
            *honest_manifest(
                GOOD,
                tensors=[
                    peer_pb2.TensorInfo(name="weights", shape=[NUMEL], dtype="F32"),
                    peer_pb2.TensorInfo(name="extra", shape=[1], dtype="F32"),
                ],
            ),
            "lists tensors",
        ),
        "oversized-payload": (*honest_manifest(GOOD, byte_size=32 * MIB), "exceeds the limit"),
        "bad-digest-field": (*honest_manifest(GOOD, weights_blake3="abc"), "not a BLAKE3"),
        "sha256-owner": (sha256_owner_manifest(GOOD), chunks_of(GOOD), "has no BLAKE3 digest"),
        "runs-past-manifest": (manifest_of(GOOD[:-8]), chunks_of(GOOD), "runs past"),
        "truncated-stream": (manifest_of(GOOD), chunks_of(GOOD[:-8]), "stream ended"),
        "offset-gap": (manifest_of(GOOD), gap, "chunk at offset"),
        "chunk-too-big": (
            manifest_of(huge_chunk),
            [peer_pb2.Chunk(data=huge_chunk, offset=0)],
            "exceeds 1048576",
        ),
        "header-lies-dtype": (
            *honest_manifest(
                raw_payload(
                    {
                        "weights": {
                            "dtype": "F64",
                            "shape": [NUMEL // 2],
                            "data_offsets": ENTRY["data_offsets"],
                        }
                    },
                    ZEROS,
                )
            ),
            "header describes",
        ),
        "header-float-shape": (
            *honest_manifest(raw_payload({"weights": {**ENTRY, "shape": [float(NUMEL)]}}, ZEROS)),
            "header describes",
        ),
        "header-extra-tensor": (
            *honest_manifest(
                raw_payload({"weights": ENTRY, "bias": {**ENTRY, "data_offsets": [0, 0]}}, ZEROS)
            ),
            "exactly one tensor",
        ),
        "header-duplicate-key": (
            *honest_manifest(
                raw_payload(f'{{"weights":{entry},"weights":{entry}}}'.encode(), ZEROS)
            ),
            "duplicate keys",
        ),
        "header-not-json": (
            *honest_manifest(raw_payload(b"{nope" + b" " * 60, ZEROS)),
            "malformed",
        ),
        "header-too-long": (
            *honest_manifest(struct.pack("<Q", 1 << 62) + ZEROS),
            "header of",
        ),
        "header-length-lies": (
            *honest_manifest(raw_payload({"weights": ENTRY}, ZEROS + b"\0" * 16)),
            "do not add up",
        ),
        "metadata-claims-other-owner": (
            *honest_manifest(payload_of(torch.zeros(NUMEL), owner=OWNER + 1)),
            "metadata claims",
        ),
    }
    return cases


@pytest.mark.parametrize("case", list(bad_cases()))
def test_misbehaving_peer_is_invalid(serve, case):
    manifest, chunks, message = bad_cases()[case]
    address, _ = serve(FakePeer(manifest, chunks))
    with pytest.raises(InvalidPeerModel, match=message):
        fetch_from(address)


@pytest.mark.parametrize(
    ("chunks", "manifest_on", "message"),
    [
        (chunks_of(GOOD), (), "the first chunk carries no manifest"),
        (chunks_of(GOOD, size=1000), (0, 1), "a second manifest at offset 1000"),
        ([], (0,), "the stream ended before its manifest"),
    ],
    ids=["no-manifest", "second-manifest", "empty-stream"],
)
def test_manifest_only_on_the_first_chunk(serve, chunks, manifest_on, message):
    address, _ = serve(FakePeer(manifest_of(GOOD), chunks, manifest_on=manifest_on))
    with pytest.raises(InvalidPeerModel, match=message):
        fetch_from(address)


BIG = payload_of(torch.randn(400_000))  # 1.6 MB: two chunks


@pytest.mark.parametrize("then", ["abort", "stall"])
def test_peer_failing_mid_stream_is_unavailable_fast(serve, then):
    address, _ = serve(FakePeer(manifest_of(BIG, numel=400_000), chunks_of(BIG), 0, then))
    started = time.monotonic()
    with pytest.raises(PeerUnavailable, match=r"INTERNAL|DEADLINE_EXCEEDED"):
        fetch_from(address, numel=400_000, timeout_s=1.0)
    assert time.monotonic() - started < 3


def test_server_stopped_mid_stream_is_unavailable_fast(serve):
    peer = FakePeer(manifest_of(BIG, numel=400_000), chunks_of(BIG), 0, "stall")
    address, server = serve(peer)

    def stop_after_first_chunk() -> None:
        peer.sent.wait(5)
        server.stop(None)

    stopper = threading.Thread(target=stop_after_first_chunk)
    stopper.start()
    started = time.monotonic()
    with pytest.raises(PeerUnavailable, match=r"CANCELLED|UNAVAILABLE"):
        fetch_from(address, numel=400_000, timeout_s=10.0)
    assert time.monotonic() - started < 3
    stopper.join()


def test_message_over_the_grpc_limit_is_unavailable(serve):
    huge = b"\0" * (2 * MIB)
    address, _ = serve(FakePeer(manifest_of(huge), [peer_pb2.Chunk(data=huge, offset=0)]))
    with pytest.raises(PeerUnavailable, match="RESOURCE_EXHAUSTED"):
        fetch_from(address)


def flipped_first_weight(payload: bytes) -> bytes:
    at = 8 + int.from_bytes(payload[:8], "little")
    return payload[:at] + bytes([payload[at] ^ 1]) + payload[at + 1 :]


def hashing_threads() -> set[int | None]:
    return {t.ident for t in threading.enumerate() if t.name.startswith("digest")}


@pytest.fixture
def no_inline(monkeypatch):
    """Every fetch hashes on a worker thread, however small its model."""
    monkeypatch.setattr(background_hash, "INLINE_BYTES", 0)


def test_digest_mismatch_early_in_a_long_stream_is_invalid(serve, no_inline):
    # Many chunks, so the damaged one is hashed in the background long before the end.
    chunks = chunks_of(flipped_first_weight(GOOD), size=100)
    address, _ = serve(FakePeer(manifest_of(GOOD), chunks))
    with pytest.raises(InvalidPeerModel, match="BLAKE3"):
        fetch_from(address)


@pytest.mark.parametrize("case", ["digest-mismatch", "truncated-stream", "offset-gap"])
def test_no_hashing_thread_outlives_a_refused_fetch(serve, no_inline, case):
    manifest, chunks, message = bad_cases()[case]
    address, _ = serve(FakePeer(manifest, chunks))
    before = hashing_threads()
    with pytest.raises(InvalidPeerModel, match=message):
        fetch_from(address)
    assert hashing_threads() <= before


def test_no_hashing_thread_outlives_a_stream_cut_midway(serve, no_inline):
    address, _ = serve(FakePeer(manifest_of(BIG, numel=400_000), chunks_of(BIG), 0, "abort"))
    before = hashing_threads()
    with pytest.raises(PeerUnavailable, match="INTERNAL"):
        fetch_from(address, numel=400_000)
    assert hashing_threads() <= before
