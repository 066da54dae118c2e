"""The on-disk model store: safe format, atomic publish, pruning, restart, owner check."""

from __future__ import annotations

import os
import threading

import pytest
import torch
from blake3 import blake3
from safetensors import safe_open
from safetensors.torch import save

from collabfl.client import background_hash, model_store
from collabfl.client.model_store import (
    CorruptModel,
    DiskModelStore,
    PublishedModels,
    StoredModel,
    VerifiedFiles,
)
from collabfl.client.peers import ModelPublisher


def stored(store: DiskModelStore, round_index: int) -> StoredModel:
    with store.open_round(round_index) as published:
        return published.stored


def test_publish_load_round_trip_in_safetensors(tmp_path):
    store = DiskModelStore(tmp_path, owner=4)
    vector = torch.randn(1000)
    store.publish(4, 7, vector, num_samples=123)
    assert store.path(7).name == "round_000007.safetensors"
    assert torch.equal(store.load(7), vector)
    with safe_open(store.path(7), framework="pt") as file:
        assert list(file.keys()) == ["weights"]
        assert file.metadata() == {
            "owner": "4",
            "round": "7",
            "num_samples": "123",
            "weights_blake3": blake3(vector.numpy().tobytes()).hexdigest(),
        }
    described = stored(store, 7)
    assert described.byte_size == store.path(7).stat().st_size
    assert described.weights_digest == blake3(vector.numpy().tobytes()).hexdigest()
    assert [(t.name, t.shape, t.dtype) for t in described.tensors] == [("weights", (1000,), "F32")]
    assert described.num_samples == 123


def test_is_a_model_publisher(tmp_path):
    publisher: ModelPublisher = DiskModelStore(tmp_path, owner=0)
    publisher.publish(0, 0, torch.zeros(3))


def test_restart_sees_published_rounds(tmp_path):
    DiskModelStore(tmp_path, owner=1).publish(1, 2, torch.arange(4.0))
    again = DiskModelStore(tmp_path, owner=1)
    assert again.latest_round() == 2
    assert torch.equal(again.load(2), torch.arange(4.0))
    assert stored(again, 2).num_samples is None


def test_keeps_only_recent_rounds(tmp_path):
    store = DiskModelStore(tmp_path, owner=0, keep_rounds=2)
    assert store.latest_round() is None
    for round_index in range(5):
        store.publish(0, round_index, torch.full((3,), float(round_index)))
    assert store.rounds() == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "round_000003.safetensors",
        "round_000004.safetensors",
    ]
    with pytest.raises(FileNotFoundError):
        store.open_round(1)


def test_failed_publish_leaves_no_trace(tmp_path, monkeypatch):
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.zeros(3))

    def crash(*args):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        store.publish(0, 1, torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["round_000000.safetensors"]
    assert store.latest_round() == 0


def test_leftover_temp_file_is_cleaned_on_start(tmp_path):
    (tmp_path / ".round_000001.safetensors.abc.tmp").write_bytes(b"half a model")
    store = DiskModelStore(tmp_path, owner=0)
    assert list(tmp_path.iterdir()) == []
    assert store.rounds() == []


def test_republishing_a_round_refreshes_its_digest(tmp_path):
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.zeros(3))
    first = stored(store, 0).weights_digest
    store.publish(0, 0, torch.ones(3))
    assert stored(store, 0).weights_digest != first
    assert stored(DiskModelStore(tmp_path, owner=0), 0) == stored(store, 0)


@pytest.mark.parametrize(
    ("owner", "vector", "message"),
    [
        (5, torch.zeros(3), "publishes for client 0, not 5"),
        (0, torch.zeros(3, dtype=torch.float64), "1-D float32"),
        (0, torch.zeros(2, 2), "1-D float32"),
    ],
    ids=["other-owner", "float64", "2-d"],
)
def test_refuses_what_it_cannot_publish(tmp_path, owner, vector, message):
    store = DiskModelStore(tmp_path, owner=0)
    with pytest.raises(ValueError, match=message):
        store.publish(owner, 0, vector)
    assert store.rounds() == []


@pytest.mark.parametrize("size", [1 << 10, 1 << 12, 1 << 20])
def test_chunks_are_the_file_in_order(tmp_path, size):
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.randn(3000))
    with store.open_round(0) as published:
        chunks = list(published.chunks(size))
    assert b"".join(chunks) == store.path(0).read_bytes()
    assert all(len(chunk) == size for chunk in chunks[:-1])


def test_damaged_weights_fail_before_the_last_chunk(tmp_path):
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.randn(3000))
    with store.path(0).open("r+b") as file:
        file.seek(-4, 2)
        file.write(b"\xff\xff\xff\xff")
    count = -(-store.path(0).stat().st_size // (1 << 10))
    with store.open_round(0) as published:
        chunks = published.chunks(1 << 10)
        for _ in range(count - 1):
            next(chunks)
        with pytest.raises(CorruptModel, match="BLAKE3 of the stored weights"):
            next(chunks)  # the last chunk never leaves


def test_damaged_header_is_refused_on_open(tmp_path):
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.randn(30))
    store.path(0).write_bytes(b"\x10" + bytes(7) + b"{not json at all" + bytes(120))
    with pytest.raises(CorruptModel, match="header is damaged"):
        store.open_round(0)


def test_a_round_published_with_a_sha256_is_refused_not_served(tmp_path):
    """A round published before BLAKE3 records only a SHA-256: never served unchecked."""
    store = DiskModelStore(tmp_path, owner=0)
    vector = torch.randn(30)
    metadata = {"owner": "0", "round": "0", "weights_sha256": "0" * 64}
    store.path(0).parent.mkdir(parents=True, exist_ok=True)
    store.path(0).write_bytes(save({"weights": vector}, metadata=metadata))
    with pytest.raises(CorruptModel, match="no recorded digest"):
        store.open_round(0)


def test_awaits_only_rounds_past_the_latest(tmp_path):
    store = DiskModelStore(tmp_path, owner=0, keep_rounds=2)
    assert store.awaits(0)
    for round_index in range(3):
        store.publish(0, round_index, torch.zeros(3))
    assert [store.awaits(r) for r in range(5)] == [False, False, False, True, True]


def test_joining_a_run_makes_its_folder_ready_for_serving(tmp_path):
    published = PublishedModels(tmp_path / "published", owner=0)
    published.for_publishing("old").publish(0, 0, torch.zeros(3))
    published.retire_other_runs("new")
    assert published.for_serving("old") is None
    assert published.for_serving("new").rounds() == []  # a run it is in, nothing out yet


def test_damaged_weights_fail_before_the_last_chunk_when_hashed_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(background_hash, "INLINE_BYTES", 0)
    test_damaged_weights_fail_before_the_last_chunk(tmp_path)


def test_a_stream_abandoned_midway_stops_its_hashing(tmp_path, monkeypatch):
    monkeypatch.setattr(background_hash, "INLINE_BYTES", 0)
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.randn(3000))

    def hashing() -> set[int | None]:
        return {t.ident for t in threading.enumerate() if t.name.startswith("digest")}

    before = hashing()
    with store.open_round(0) as published:
        chunks = published.chunks(1 << 10)
        next(chunks)
        next(chunks)
        assert hashing() - before  # hashing behind the stream
        chunks.close()  # the fetcher went away
    assert hashing() <= before


class CountingDigest(background_hash.BackgroundDigest):
    """The real background hash, counting how many streams it was started for."""

    started = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).started += 1


def serve_whole(store: DiskModelStore, round_index: int) -> bytes:
    with store.open_round(round_index) as published:
        return b"".join(published.chunks(1 << 10))


def test_a_served_file_is_hashed_once_while_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(model_store, "BackgroundDigest", CountingDigest)
    CountingDigest.started = 0
    published = PublishedModels(tmp_path, owner=0)
    published.for_publishing("run").publish(0, 0, torch.randn(3000))
    expected = published.for_publishing("run").path(0).read_bytes()
    for _ in range(3):
        assert serve_whole(published.for_serving("run"), 0) == expected  # stores share the record
    assert CountingDigest.started == 1
    published.for_publishing("run").publish(0, 0, torch.randn(3000))  # republished: a new file
    serve_whole(published.for_serving("run"), 0)
    assert CountingDigest.started == 2


def test_a_file_changed_in_place_after_a_serve_is_checked_again(tmp_path):
    published = PublishedModels(tmp_path, owner=0)
    published.for_publishing("run").publish(0, 0, torch.randn(3000))
    store = published.for_serving("run")
    serve_whole(store, 0)
    path = store.path(0)
    stat = path.stat()
    with path.open("r+b") as file:
        file.seek(-4, os.SEEK_END)
        file.write(b"\xff\xff\xff\xff")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the ctime still moves
    with pytest.raises(CorruptModel, match="BLAKE3 of the stored weights"):
        serve_whole(store, 0)


def test_neither_a_damaged_file_nor_a_cut_stream_counts_as_checked(tmp_path):
    published = PublishedModels(tmp_path, owner=0)
    published.for_publishing("run").publish(0, 0, torch.randn(3000))
    store = published.for_serving("run")
    with store.open_round(0) as served:
        chunks = served.chunks(1 << 10)
        next(chunks)
        chunks.close()  # the fetcher went away before the digest was compared
        assert not served.checked_before
    with store.path(0).open("r+b") as file:
        file.seek(-4, os.SEEK_END)
        file.write(b"\xff\xff\xff\xff")
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(CorruptModel):
            serve_whole(store, 0)


def test_a_store_without_a_record_checks_every_serve(tmp_path, monkeypatch):
    monkeypatch.setattr(model_store, "BackgroundDigest", CountingDigest)
    CountingDigest.started = 0
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.randn(3000))
    serve_whole(store, 0)
    serve_whole(store, 0)
    assert CountingDigest.started == 2


def test_verified_files_keep_the_newest_within_capacity():
    record = VerifiedFiles(capacity=2)
    first, second, third = ((f"round_{n}", 0, n, 10, 0, 0) for n in range(3))
    record.add(first)
    record.add(second)
    record.add(first)  # touched again: now the newest
    record.add(third)
    assert (first in record, second in record, third in record) == (True, False, True)
    with pytest.raises(ValueError, match="capacity"):
        VerifiedFiles(capacity=0)
