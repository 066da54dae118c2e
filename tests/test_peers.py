"""The client-side fetch seam: budget, validation, accounting, store retention."""

from __future__ import annotations

import pytest
import torch

from collabfl.client.peers import BudgetExceeded, MemoryModelStore, PeerFetcher, PeerUnavailable


@pytest.fixture
def store() -> MemoryModelStore:
    store = MemoryModelStore(keep_rounds=2)
    for owner in range(5):
        store.publish(owner, 0, torch.full((4,), float(owner)))
    return store


def test_hold_fetches_counts_and_releases(store):
    fetcher = PeerFetcher(store, expected_numel=4)
    with fetcher.hold([1, 2, 3], 0, limit=3) as models:
        assert sorted(models) == [1, 2, 3]
        assert fetcher.resident == 3
        assert torch.equal(models[2], torch.full((4,), 2.0))
    assert fetcher.resident == 0
    stats = fetcher.take_stats()
    assert (stats.models_fetched, stats.bytes_fetched, stats.peak_resident) == (3, 48, 3)
    assert fetcher.take_stats().models_fetched == 0


def test_budget_is_enforced_before_fetching(store):
    fetcher = PeerFetcher(store, expected_numel=4)
    with fetcher.hold([1, 2], 0, limit=3), pytest.raises(BudgetExceeded):  # noqa: SIM117
        with fetcher.hold([3, 4], 0, limit=3):
            pass
    assert fetcher.resident == 0
    assert fetcher.take_stats().peak_resident == 2


@pytest.mark.parametrize(
    "bad",
    [
        torch.tensor([1.0, float("nan"), 0.0, 0.0]),
        torch.tensor([1.0, float("inf"), 0.0, 0.0]),
        torch.zeros(5),
        torch.zeros(4, dtype=torch.float64),
        torch.zeros(2, 2),
    ],
    ids=["nan", "inf", "wrong-size", "wrong-dtype", "wrong-shape"],
)
def test_invalid_models_are_skipped_and_counted(store, bad, caplog):
    store.publish(9, 0, bad)
    fetcher = PeerFetcher(store, expected_numel=4)
    with fetcher.hold([1, 9], 0, limit=None) as models:
        assert sorted(models) == [1]
    stats = fetcher.take_stats()
    assert stats.failures == 1 and stats.models_fetched == 1
    assert "skipping peer 9" in caplog.text


def test_unavailable_peer_is_skipped(store):
    fetcher = PeerFetcher(store, expected_numel=4)
    with fetcher.hold([1, 42], 0, limit=None) as models:
        assert list(models) == [1]
    with fetcher.hold([1], 7, limit=None) as models:
        assert models == {}
    assert fetcher.take_stats().failures == 2


def test_store_keeps_only_recent_rounds(store):
    for round_index in (1, 2, 3):
        store.publish(0, round_index, torch.zeros(4))
    with pytest.raises(PeerUnavailable):
        store.fetch(0, 1)
    assert store.fetch(0, 3).shape == (4,)
    store.forget(0)
    with pytest.raises(PeerUnavailable):
        store.fetch(0, 3)
