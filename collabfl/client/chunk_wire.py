"""The ``Chunk`` message of peer.proto, encoded and decoded by hand around its payload.

Through protobuf a chunk's data is copied twice more than it must be: into the message and
then into the serialised string when the server builds it (one copy would do), and out of
the received string into a new ``bytes`` on the fetcher's side. A 200 MB model is then
400 MB of extra copying on a link where CPU, not the wire, sets the pace (docs/performance.md,
"The peer link"). Here the server joins a few header bytes to the file's data once, and the
fetcher gets the data as a view of the bytes gRPC handed over. The bytes on the wire
are those of ``peer_pb2.Chunk`` (fields in number order, an offset of 0 left out), and the
manifest still goes through protobuf: it is small and parsed once a fetch.

The decoder reads what a peer sent, so it is strict: a truncated or overlong field, a
second ``data``, ``offset`` or ``manifest``, or a wire type that is not the field's is a
``MalformedChunk``; unknown fields are skipped, as protobuf would.
"""

from __future__ import annotations

from dataclasses import dataclass

from collabfl.proto import peer_pb2

_DATA, _OFFSET, _MANIFEST = 1, 2, 3
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


class MalformedChunk(ValueError):
    """The bytes are not a ``Chunk`` this fetcher accepts."""


@dataclass(frozen=True)
class WireChunk:
    """A decoded chunk: ``data`` is a view of the received message, not a copy."""

    data: memoryview
    offset: int
    manifest: peer_pb2.Manifest | None


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # int64 as protobuf writes it: negatives take ten bytes
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_chunk(data: bytes, offset: int, manifest: peer_pb2.Manifest | None = None) -> bytes:
    """The serialised ``Chunk(data=data, offset=offset, manifest=manifest)``, ``data``
    copied once."""
    tail = b""
    if offset:
        tail += _varint(_OFFSET << 3 | _VARINT) + _varint(offset)
    if manifest is not None:
        raw = manifest.SerializeToString()
        tail += _varint(_MANIFEST << 3 | _LEN) + _varint(len(raw)) + raw
    head = _varint(_DATA << 3 | _LEN) + _varint(len(data)) if data else b""
    return b"".join((head, data, tail))


def _read_varint(view: memoryview, at: int) -> tuple[int, int]:
    """The unsigned varint at ``at`` and the position after it."""
    value = shift = 0
    for index in range(at, min(at + _MAX_VARINT_BYTES, len(view))):
        byte = view[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise MalformedChunk(f"a truncated or overlong varint at byte {at}")


def decode_chunk(message: bytes) -> WireChunk:
    """The chunk in ``message``; MalformedChunk when it is not a well-formed ``Chunk``."""
    view = memoryview(message)
    data: memoryview | None = None
    offset: int | None = None
    manifest: peer_pb2.Manifest | None = None
    at = 0
    while at < len(view):
        key, at = _read_varint(view, at)
        field, wire_type = key >> 3, key & 7
        expected = _VARINT if field == _OFFSET else _LEN
        if field in (_DATA, _OFFSET, _MANIFEST) and wire_type != expected:
            raise MalformedChunk(f"field {field} has wire type {wire_type}")
        if wire_type == _VARINT:
            value, at = _read_varint(view, at)
            if field == _OFFSET:
                if offset is not None:
                    raise MalformedChunk("a second offset")
                value &= (1 << 64) - 1  # as protobuf reads an int64
                offset = value - (1 << 64) if value >> 63 else value
        elif wire_type == _LEN:
            size, at = _read_varint(view, at)
            if at + size > len(view):
                raise MalformedChunk(f"field {field} runs past the message's end")
            body, at = view[at : at + size], at + size
            if field == _DATA:
                if data is not None:
                    raise MalformedChunk("a second data field")
                data = body
            elif field == _MANIFEST:
                if manifest is not None:
                    raise MalformedChunk("a second manifest")
                manifest = _manifest(body)
        elif wire_type in (_I64, _I32):
            at += 8 if wire_type == _I64 else 4
            if at > len(view):
                raise MalformedChunk(f"field {field} runs past the message's end")
        else:
            raise MalformedChunk(f"wire type {wire_type} of field {field}")
    return WireChunk(view[:0] if data is None else data, offset or 0, manifest)


def _manifest(body: memoryview) -> peer_pb2.Manifest:
    manifest = peer_pb2.Manifest()
    try:
        manifest.ParseFromString(body.tobytes())  # small, once a fetch
    except Exception as error:  # protobuf's DecodeError differs between its backends
        raise MalformedChunk(f"an unreadable manifest: {error}") from None
    return manifest
