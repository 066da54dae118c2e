"""The gRPC adapter of ``PeerModelSource``: fetch a peer's model from its daemon.

Everything a peer sends is untrusted. One call fetches a model: the manifest on its first
chunk is checked against what this client expects before any of the payload is used; the
streamed safetensors payload is parsed here, header included, and its tensor bytes are
written straight into a preallocated tensor; a worker thread hashes each region of the
tensor while the next chunk arrives, and the BLAKE3 digest is compared, at the end, with the
digest the owner recorded at publish. Chunks are decoded by ``chunk_wire``, their data a
view of gRPC's message. So a fetch needs about one model's worth of memory plus what gRPC
buffers, which the receive window bounds (``BDP_MODEL_BYTES``). Network trouble becomes
``PeerUnavailable``, a payload that must not be used becomes ``InvalidPeerModel``; either
way the fetcher skips the peer.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import grpc
import torch

from collabfl.client.background_hash import DIGEST_NAME, BackgroundDigest
from collabfl.client.chunk_wire import MalformedChunk, decode_chunk
from collabfl.client.model_store import TENSOR_NAME
from collabfl.client.peers import InvalidPeerModel, PeerUnavailable
from collabfl.client.stream_limits import BUSY_KEY
from collabfl.kernel.printable import shown
from collabfl.kernel.tls import ClientTLS
from collabfl.proto import peer_pb2

FETCH_METHOD = "/collabfl.peer.PeerModels/FetchModel"
MAX_CHUNK_BYTES = 1 << 20
MAX_HEADER_BYTES = 64 * 1024
"""A one-tensor header is ~150 bytes; a larger one is refused before it is buffered."""
_DTYPE = "F32"
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
_ITEM_BYTES = 4
_LENGTH_BYTES = 8
_MESSAGE_SLACK = 64 * 1024
"""Room for the Chunk message's own fields on top of its data."""
BDP_MODEL_BYTES = 64 * 1024 * 1024
"""Models at least this big are fetched with gRPC's bandwidth-delay probing, which grows the
receive window (to several MB) when the stream is fast; smaller ones keep the fixed 64 KiB
window. Measured (benchmarks/peer_link.py, 10 Gbit, mutual TLS, 200 MB, 2 loaded cores):
fixed windows of 64 KiB and 256 KiB fetched at 0.28x and 0.25x raw TCP, probing at 0.36x;
but what the grown window buffers cost a 32 MB fetch 0.12-0.36x the model in extra memory
on top of the model itself, against 0.02-0.12x with the fixed window (tests/
test_peer_fetch_memory.py). Above this size those few MB are under 0.2x the model."""
BUSY_PAUSE_S, BUSY_PAUSE_CAP_S = 0.05, 1.0
"""Pauses before asking a busy peer again (all its stream slots taken: in a round where
every client fetches at once, a popular owner serves its fetchers a few at a time)."""


def _busy(error: grpc.RpcError) -> bool:
    """Whether the peer refused only because its stream slots are all taken."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return False
    trailing = error.trailing_metadata() or ()
    return any(item.key == BUSY_KEY for item in trailing)


class GrpcPeerSource:
    """Fetches peer models of run ``run`` over gRPC; one channel per peer address.

    ``grants`` maps owner -> grant token for the round being fetched; it is read at fetch
    time, so the caller may update the mapping between rounds. ``timeout_s`` bounds one
    whole fetch (the wait for an owner that has not published the round yet, and the
    transfer): no call can hang. Over mutual TLS ``tls`` carries this daemon's member
    certificate, which peers check the grants against. ``launch`` names the Flower run of the
    round being fetched, so that an owner that joined another launch does not keep the fetch
    waiting for a round of this one.
    """

    def __init__(
        self,
        addresses: Mapping[int, str],
        grants: Mapping[int, bytes],
        expected_numel: int,
        max_bytes: int,
        timeout_s: float,
        tls: ClientTLS | None = None,
        *,
        run: str,
        launch: str = "",
    ) -> None:
        self.run = run
        self.launch = launch
        self.addresses = addresses
        self.grants = grants
        self.expected_numel = expected_numel
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self._tls = tls
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def fetch(self, owner: int, round_index: int) -> torch.Tensor:
        """The owner's model; a peer that is busy serving others is asked again, with
        growing pauses, until ``timeout_s`` is spent."""
        address = self.addresses.get(owner)
        if address is None:
            raise PeerUnavailable(f"no address known for peer {owner}")
        grant = self.grants.get(owner)
        if grant is None:
            raise PeerUnavailable(f"no grant to fetch peer {owner}'s round {round_index}")
        request = peer_pb2.FetchRequest(
            owner=owner, round=round_index, grant=grant, run=self.run, launch=self.launch
        )
        # Raw bytes, decoded in ``_receive``: a chunk's data is then a view, not a copy.
        fetch_model: grpc.UnaryStreamMultiCallable[peer_pb2.FetchRequest, bytes] = self._channel(
            address
        ).unary_stream(FETCH_METHOD, request_serializer=peer_pb2.FetchRequest.SerializeToString)
        deadline = time.monotonic() + self.timeout_s
        pause = BUSY_PAUSE_S
        while True:
            call = fetch_model(request, timeout=max(deadline - time.monotonic(), 0.001))
            try:
                return self._receive(owner, round_index, call)
            except grpc.RpcError as error:
                if _busy(error) and time.monotonic() + pause < deadline:
                    time.sleep(pause)
                    pause = min(2 * pause, BUSY_PAUSE_CAP_S)
                    continue
                reason = (
                    f"peer {owner} at {address}, round {round_index}: "
                    f"{error.code().name}: {shown(error.details() or '')}"  # the peer's words
                )
                if error.code() == grpc.StatusCode.DATA_LOSS:  # the peer's own file failed
                    raise InvalidPeerModel(reason) from None
                raise PeerUnavailable(reason) from None
            finally:
                call.cancel()  # no-op after a complete stream; frees the peer if we gave up

    def close(self) -> None:
        """Close every channel; the source can still be used (channels reopen on demand)."""
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel in channels.values():
            channel.close()

    def __enter__(self) -> GrpcPeerSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _channel(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                options = [("grpc.max_receive_message_length", MAX_CHUNK_BYTES + _MESSAGE_SLACK)]
                if self.expected_numel * _ITEM_BYTES < BDP_MODEL_BYTES:
                    options.append(("grpc.http2.bdp_probe", 0))
                if self._tls is None:
                    channel = grpc.insecure_channel(address, options=options)
                else:
                    channel = grpc.secure_channel(address, self._tls.credentials(), options)
                self._channels[address] = channel
            return channel

    def _receive(self, owner: int, round_index: int, messages: Iterable[bytes]) -> torch.Tensor:
        """The model in ``messages`` (serialised chunks): the first one's manifest checked
        before any data is used."""

        def invalid(reason: str) -> InvalidPeerModel:
            return InvalidPeerModel(f"peer {owner} round {round_index}: {reason}")

        sink: _PayloadSink | None = None
        try:
            for message in messages:
                try:
                    chunk = decode_chunk(message)
                except MalformedChunk as error:
                    raise invalid(f"a malformed chunk: {error}") from None
                if sink is None:
                    if chunk.manifest is None:
                        raise invalid("the first chunk carries no manifest")
                    self._check_manifest(owner, round_index, chunk.manifest)
                    sink = _PayloadSink(owner, round_index, self.expected_numel, chunk.manifest)
                elif chunk.manifest is not None:
                    raise invalid(f"a second manifest at offset {chunk.offset}")
                sink.feed(chunk.offset, chunk.data)
            if sink is None:
                raise invalid("the stream ended before its manifest")
            return sink.finish()
        finally:
            if sink is not None:
                sink.close()

    def _check_manifest(self, owner: int, round_index: int, manifest: peer_pb2.Manifest) -> None:
        """Refuse, before any of the payload is used, a model this client cannot use."""

        def invalid(reason: str) -> InvalidPeerModel:
            return InvalidPeerModel(f"peer {owner} round {round_index}: manifest {reason}")

        if (manifest.owner, manifest.round) != (owner, round_index):
            raise invalid(f"is for peer {manifest.owner} round {manifest.round}")
        tensors = [(t.name, list(t.shape), t.dtype) for t in manifest.tensors]
        expected = [(TENSOR_NAME, [self.expected_numel], _DTYPE)]
        if tensors != expected:
            raise invalid(f"lists tensors {tensors}, expected {expected}")
        if manifest.byte_size > self.max_bytes:
            raise invalid(f"size {manifest.byte_size} bytes exceeds the limit of {self.max_bytes}")
        if not manifest.weights_blake3:
            raise invalid(f"has no {DIGEST_NAME} digest (is the owner an older collabfl?)")
        if not _HEX_DIGEST.fullmatch(manifest.weights_blake3):
            digest = manifest.weights_blake3[:80]
            raise invalid(f"digest {digest!r} is not a {DIGEST_NAME} hex digest")


class _PayloadSink:
    """Consumes a streamed one-tensor safetensors payload into a preallocated tensor.

    Layout: 8-byte little-endian header length, a JSON header, then the tensor bytes. The
    header must describe exactly the tensor the manifest announced, the payload must end
    exactly where that tensor does, and the tensor bytes must have the manifest's digest.
    """

    def __init__(
        self, owner: int, round_index: int, numel: int, manifest: peer_pb2.Manifest
    ) -> None:
        self.owner = owner
        self.round = round_index
        self.numel = numel
        self.byte_size = manifest.byte_size
        self.weights_digest = manifest.weights_blake3.lower()
        self.tensor = torch.empty(numel, dtype=torch.float32)
        self._dest = self.tensor.numpy().data.cast("B")
        self._head = bytearray()
        self._header_len: int | None = None
        self._data_start: int | None = None
        self._received = 0
        self._digest = BackgroundDigest()

    def feed(self, offset: int, data: memoryview) -> None:
        if offset != self._received:
            raise self._invalid(f"chunk at offset {offset}, expected {self._received}")
        if len(data) > MAX_CHUNK_BYTES:
            raise self._invalid(f"chunk of {len(data)} bytes exceeds {MAX_CHUNK_BYTES}")
        if self._received + len(data) > self.byte_size:
            raise self._invalid(f"payload runs past the manifest's {self.byte_size} bytes")
        view = data
        while view and self._data_start is None:
            view = self._take_head(view)
        if view and self._data_start is not None:  # the header is complete: this is data
            start = self._received + len(data) - len(view) - self._data_start
            region = self._dest[start : start + len(view)]
            region[:] = view
            self._digest.update(region)  # hashed from the tensor while the next chunk arrives
        self._received += len(data)

    def finish(self) -> torch.Tensor:
        if self._received != self.byte_size or self._data_start is None:
            raise self._invalid(f"stream ended after {self._received} of {self.byte_size} bytes")
        if self._digest.hexdigest() != self.weights_digest:
            raise self._invalid(f"{DIGEST_NAME} of the tensor bytes does not match the manifest")
        return self.tensor

    def close(self) -> None:
        """Stop the hashing worker (after ``finish`` or when the stream failed)."""
        self._digest.close()

    def _take_head(self, view: memoryview) -> memoryview:
        """Move header bytes from ``view`` into the head buffer; return what is left."""
        wanted = _LENGTH_BYTES + (self._header_len or 0) - len(self._head)
        self._head += view[:wanted]
        view = view[wanted:]
        if self._header_len is None and len(self._head) == _LENGTH_BYTES:
            self._header_len = self._check_length(int.from_bytes(self._head, "little"))
        if self._header_len is not None and len(self._head) == _LENGTH_BYTES + self._header_len:
            self._check_header(bytes(self._head[_LENGTH_BYTES:]))
            self._data_start = len(self._head)
            self._head = bytearray()
        return view

    def _check_length(self, header_len: int) -> int:
        if header_len > MAX_HEADER_BYTES:
            raise self._invalid(f"header of {header_len} bytes exceeds {MAX_HEADER_BYTES}")
        if _LENGTH_BYTES + header_len + self.numel * _ITEM_BYTES != self.byte_size:
            raise self._invalid(
                f"header length {header_len} and {self.numel} float32 values do not add up "
                f"to the manifest's {self.byte_size} bytes"
            )
        return header_len

    def _check_header(self, raw: bytes) -> None:
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
        except (ValueError, RecursionError) as error:
            raise self._invalid(f"malformed header: {error}") from None
        if not isinstance(header, dict) or set(header) - {"__metadata__"} != {TENSOR_NAME}:
            raise self._invalid(f"header must hold exactly one tensor {TENSOR_NAME!r}")
        entry = header[TENSOR_NAME]
        expected = {
            "dtype": _DTYPE,
            "shape": [self.numel],
            "data_offsets": [0, self.numel * _ITEM_BYTES],
        }
        if not _same_json(entry, expected):
            raise self._invalid(f"header describes {entry!r}, the manifest {expected!r}")
        metadata = header.get("__metadata__", {})
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise self._invalid("header metadata must map strings to strings")
        claimed = {key: metadata[key] for key in ("owner", "round") if key in metadata}
        actual = {"owner": str(self.owner), "round": str(self.round)}
        if any(actual[key] != value for key, value in claimed.items()):
            raise self._invalid(f"header metadata claims {claimed}, expected {actual}")

    def _invalid(self, reason: str) -> InvalidPeerModel:
        return InvalidPeerModel(f"peer {self.owner} round {self.round}: {reason}")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object hook: two readers must never disagree about a repeated key."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate keys in {keys}")
    return dict(pairs)


def _same_json(value: Any, expected: Any) -> bool:
    """Equality that does not let JSON's 5.0 or true stand in for the integer 5 or 1."""
    if isinstance(expected, dict):
        return (
            isinstance(value, dict)
            and value.keys() == expected.keys()
            and all(_same_json(value[k], expected[k]) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(value, list)
            and len(value) == len(expected)
            and all(_same_json(v, e) for v, e in zip(value, expected, strict=True))
        )
    return type(value) is type(expected) and value == expected
