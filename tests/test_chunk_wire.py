"""The hand-made Chunk codec agrees with protobuf's and refuses what a peer must not send."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from collabfl.client.chunk_wire import MalformedChunk, decode_chunk, encode_chunk
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peers import InvalidPeerModel
from collabfl.proto import peer_pb2

MANIFEST = peer_pb2.Manifest(
    owner=3,
    round=7,
    tensors=[peer_pb2.TensorInfo(name="weights", shape=[5], dtype="F32")],
    byte_size=100,
    weights_blake3="ab" * 32,
    num_samples=12,
)


@pytest.mark.parametrize(
    ("data", "offset", "manifest"),
    [
        (b"x" * 300, 0, MANIFEST),
        (b"y" * 70_000, 262_144, None),
        (b"", 5, None),
        (b"", 0, None),
        (b"z", -1, None),
        (b"q" * 10, 1 << 40, MANIFEST),
    ],
)
def test_encode_is_protobufs_bytes_and_decode_reads_them(data, offset, manifest):
    reference = peer_pb2.Chunk(data=data, offset=offset, manifest=manifest)
    encoded = encode_chunk(data, offset, manifest)
    assert encoded == reference.SerializeToString()
    chunk = decode_chunk(encoded)
    assert (bytes(chunk.data), chunk.offset, chunk.manifest) == (data, offset, manifest)


def test_decode_skips_unknown_fields_in_any_order():
    known = peer_pb2.Chunk(data=b"abc", offset=9).SerializeToString()
    unknown = (
        bytes([0x20, 0x05, 0x2A, 0x02, 0x01, 0x02, 0x31]) + bytes(8) + bytes([0x3D]) + bytes(4)
    )
    chunk = decode_chunk(unknown + known[5:] + known[:5])
    assert (bytes(chunk.data), chunk.offset, chunk.manifest) == (b"abc", 9, None)


def test_decoded_data_is_a_view_not_a_copy():
    message = encode_chunk(b"w" * 1000, 0)
    assert decode_chunk(message).data.obj is message


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (b"\x0a\x05abc", "past the message's end"),
        (b"\x0a", "truncated"),
        (b"\x10" + b"\xff" * 11, "overlong"),
        (b"\x0a\x01a\x0a\x01b", "second data"),
        (b"\x10\x01\x10\x02", "second offset"),
        (b"\x1a\x00\x1a\x00", "second manifest"),
        (b"\x1a\x03\xff\xff\xff", "unreadable manifest"),
        (b"\x08\x01", "field 1 has wire type 0"),
        (b"\x12\x00", "field 2 has wire type 2"),
        (b"\x1b", "field 3 has wire type 3"),
        (b"\x23", "wire type 3 of field 4"),
        (b"\x21\x00", "past the message's end"),
    ],
)
def test_decode_refuses_malformed_chunks(message, match):
    with pytest.raises(MalformedChunk, match=match):
        decode_chunk(message)


def test_a_peer_sending_a_malformed_chunk_is_invalid():
    def stream(request: bytes, context: grpc.ServicerContext):
        yield b"\x0a\x05abc"  # data claims 5 bytes, 3 follow

    handler = grpc.method_handlers_generic_handler(
        "collabfl.peer.PeerModels", {"FetchModel": grpc.unary_stream_rpc_method_handler(stream)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        source = GrpcPeerSource({1: f"127.0.0.1:{port}"}, {1: b"grant"}, 4, 1 << 20, 5.0, run="run")
        with source, pytest.raises(InvalidPeerModel, match=r"malformed chunk.*past the message"):
            source.fetch(1, 0)
    finally:
        server.stop(None)
