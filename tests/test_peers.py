"""The client-side fetch seam: budget, validation, accounting, store retention."""

from __future__ import annotations

import threading

import pytest
import torch

from collabfl.client.peers import (
    MAX_PARALLEL_FETCHES,
    BudgetExceeded,
    MemoryModelStore,
    PeerFetcher,
    PeerUnavailable,
)


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


class RecordingSource:
    """Serves ``store``'s models, recording how many fetches run at once and in what order
    they end; ``gate(owner)`` runs inside each fetch and may hold it back."""

    def __init__(self, store: MemoryModelStore, gate=lambda owner: None) -> None:
        self.store = store
        self.gate = gate
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.ended: list[int] = []

    def fetch(self, owner: int, round_index: int) -> torch.Tensor:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.gate(owner)
            return self.store.fetch(owner, round_index)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.ended.append(owner)


def test_a_batch_is_fetched_concurrently_within_the_budget(store):
    together = threading.Barrier(3, timeout=10)  # passes only with all three in flight
    source = RecordingSource(store, lambda owner: together.wait())
    fetcher = PeerFetcher(source, expected_numel=4)
    with fetcher.hold([1, 2, 3], 0, limit=3) as models:
        assert list(models) == [1, 2, 3]
    assert source.most_in_flight == 3
    assert fetcher.take_stats().peak_resident == 3


def test_a_large_batch_runs_at_most_the_parallel_cap_at_once(store):
    for owner in range(5, 2 * MAX_PARALLEL_FETCHES):
        store.publish(owner, 0, torch.full((4,), float(owner)))
    together = threading.Barrier(MAX_PARALLEL_FETCHES, timeout=10)
    source = RecordingSource(store, lambda owner: together.wait())
    fetcher = PeerFetcher(source, expected_numel=4)
    owners = list(range(2 * MAX_PARALLEL_FETCHES))
    with fetcher.hold(owners, 0, limit=None) as models:
        assert list(models) == owners
    assert source.most_in_flight == MAX_PARALLEL_FETCHES


def test_batches_reuse_the_fetchers_threads(store):
    """A greedy search holds one small batch after another (at Bc = 2 and N = 20 about 14
    per search); starting new threads for each cost more than the fetches themselves."""
    threads: set[threading.Thread] = set()

    class Source:
        def fetch(self, owner: int, round_index: int) -> torch.Tensor:
            threads.add(threading.current_thread())
            return store.fetch(owner, round_index)

    fetcher = PeerFetcher(Source(), expected_numel=4)
    for _ in range(20):
        with fetcher.hold([1, 2], 0, limit=2) as models:
            assert list(models) == [1, 2]
    assert len(threads) <= MAX_PARALLEL_FETCHES


def test_the_in_memory_store_is_read_in_the_callers_thread():
    """The in-process runtime's store is a lookup: a fetch thread would only add cost."""
    threads: set[threading.Thread] = set()

    class Store(MemoryModelStore):
        def fetch(self, owner: int, round_index: int) -> torch.Tensor:
            threads.add(threading.current_thread())
            return super().fetch(owner, round_index)

    store = Store()
    for owner in range(3):
        store.publish(owner, 0, torch.full((4,), float(owner)))
    with PeerFetcher(store, expected_numel=4).hold([0, 1, 2], 0, limit=3) as models:
        assert list(models) == [0, 1, 2]
    assert threads == {threading.current_thread()}


def test_results_and_accounting_follow_the_batch_not_the_arrival_order(store, caplog):
    store.publish(9, 0, torch.tensor([1.0, float("nan"), 0.0, 0.0]))
    owners = [1, 42, 2, 9, 3]  # 42 never published, 9 sends NaN
    done = {owner: threading.Event() for owner in owners}
    later = dict(zip(owners, [*owners[1:], None], strict=True))

    def last_first(owner: int) -> None:  # each fetch ends only after the next one in the batch
        if later[owner] is not None:
            assert done[later[owner]].wait(10)

    source = RecordingSource(store, last_first)
    original = source.fetch

    def fetch(owner: int, round_index: int) -> torch.Tensor:
        try:
            return original(owner, round_index)
        finally:
            done[owner].set()

    source.fetch = fetch  # type: ignore[method-assign]
    fetcher = PeerFetcher(source, expected_numel=4)
    with fetcher.hold(owners, 0, limit=5) as models:
        assert list(models) == [1, 2, 3]
        assert [float(models[o][0]) for o in models] == [1.0, 2.0, 3.0]
    assert source.ended == owners[::-1]
    assert [line.split(":")[0] for line in fetcher.take_skipped()] == ["peer 42", "peer 9"]
    stats = fetcher.take_stats()
    assert (stats.models_fetched, stats.failures, stats.bytes_fetched) == (3, 2, 3 * 16)
    assert stats.peak_resident == 3
    skips = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert [m.split(" in ")[0] for m in skips] == ["skipping peer 42", "skipping peer 9"]
