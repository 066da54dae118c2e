"""The on-disk model store: safe format, atomic publish, pruning, restart, owner check."""

from __future__ import annotations

import hashlib
import os

import pytest
import torch
from safetensors import safe_open

from collabfl.client.model_store import DiskModelStore
from collabfl.client.peers import ModelPublisher


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
            "weights_sha256": hashlib.sha256(vector.numpy().tobytes()).hexdigest(),
        }
    described = store.describe(7)
    assert described.byte_size == store.path(7).stat().st_size
    assert described.sha256 == hashlib.sha256(store.path(7).read_bytes()).hexdigest()
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
    assert again.describe(2).num_samples is None


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
        store.describe(1)


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
    (tmp_path / ".publishing-abc").write_bytes(b"half a model")
    store = DiskModelStore(tmp_path, owner=0)
    assert list(tmp_path.iterdir()) == []
    assert store.rounds() == []


def test_republishing_a_round_refreshes_its_digest(tmp_path):
    store = DiskModelStore(tmp_path, owner=0)
    store.publish(0, 0, torch.zeros(3))
    first = store.digest(0)
    store.publish(0, 0, torch.ones(3))
    assert store.digest(0) != first
    assert DiskModelStore(tmp_path, owner=0).digest(0) == store.digest(0)


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
