"""A member's sample count may not change within a run (flower/run_consistency.py).

A liar who joins honestly and rejoins (a restarted daemon is set up again) claiming more is
held to its first count, with an ``anomaly`` naming it and both values; a training reply
whose count differs from the first is recorded the same way, once per value. Driven through
the ServerApp's admission and a FlowerClientPool as tests/test_reported_sizes.py and
tests/test_reported_metrics.py drive them.
"""

from __future__ import annotations

import torch
from support.ledger import FakeLedger

from collabfl.apps.pool import FlowerClientPool
from collabfl.coordinator.store.state import Member
from collabfl.flower.reported_sizes import DeclaredSizes
from collabfl.flower.run_consistency import FirstCounts
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Train
from tests.test_node_binding import flower_task  # noqa: F401  (autouse fixture)
from tests.test_reported_metrics import AnsweringGrid
from tests.test_reported_sizes import _admit


def test_a_rejoin_claiming_more_samples_keeps_the_first_count(monkeypatch):
    counts = FirstCounts()
    first, anomalies = _admit(monkeypatch, {0: 400, 1: 300}, DeclaredSizes(), counts)
    assert (first, anomalies) == ({0: 400, 1: 300}, [])
    again, anomalies = _admit(monkeypatch, {0: 40_000, 1: 300}, DeclaredSizes(), counts)
    assert again == {0: 400, 1: 300}
    [(client, message)] = anomalies
    assert client == 0
    assert "reported 40000 training samples, 400 earlier in this run" in message
    assert message.endswith("keeping the lowest, 400")


def test_the_first_accepted_count_is_kept_when_a_declared_size_replaced_it(monkeypatch):
    counts, declared = FirstCounts(), DeclaredSizes({0: 400})
    first, [(_, replaced)] = _admit(monkeypatch, {0: 40_000}, declared, counts)
    assert first == {0: 400} and "declared 400" in replaced
    same, anomalies = _admit(monkeypatch, {0: 40_000}, declared, counts)
    assert (same, anomalies) == ({0: 400}, [])  # the same lie again: nothing new to say
    lower, [(_, changed)] = _admit(monkeypatch, {0: 420}, declared, counts)
    assert lower == {0: 400} and "reported 420 training samples, 40000 earlier" in changed


def test_a_training_reply_with_another_count_is_recorded_once_and_not_refused():
    counts = FirstCounts({k: (100, 100) for k in range(3)})
    ledger = FakeLedger()

    def answer(client: int, step: Instruction) -> Reply:
        return Reply(ClientMetrics(train_loss=0.1, num_samples=5_000 if client == 0 else 100),
                     torch.zeros(4))  # fmt: skip

    pool = FlowerClientPool(
        AnsweringGrid(answer),
        [Member(k, 10 + k, f"h:{k}", 100) for k in range(3)],
        ledger,
        first_counts=counts,
    )
    for round_index in range(2):
        replies = pool.send(dict.fromkeys(range(3), Instruction(round_index, Train(epochs=1))))
        assert sorted(replies) == [0, 1, 2]
    [anomaly] = [e for e in ledger.events if e.kind == "anomaly"]
    assert anomaly.client_id == 0
    assert "reported 5000 training samples, 100 earlier" in anomaly.message
    assert pool.sample_counts[0] == 100


def test_a_lie_told_at_set_up_gives_way_to_the_first_honest_reply():
    """Set-up claims 100x the data (no size declared): the first training reply's honest
    count becomes the member's, so its FedAvg weight falls back from the share cap."""
    counts = FirstCounts({0: (10_000, 10_000), 1: (100, 100), 2: (100, 100)})
    ledger = FakeLedger()

    def answer(client: int, step: Instruction) -> Reply:
        return Reply(ClientMetrics(train_loss=0.1, num_samples=100), torch.zeros(4))

    members = [Member(0, 10, "h:0", 10_000), Member(1, 11, "h:1", 100), Member(2, 12, "h:2", 100)]
    pool = FlowerClientPool(
        AnsweringGrid(answer),
        members,
        ledger,
        first_counts=counts,
    )
    liar_share = pool.sample_counts[0] / sum(pool.sample_counts.values())
    assert liar_share > 0.5  # at the share cap
    pool.send(dict.fromkeys(range(3), Instruction(0, Train(epochs=1))))
    assert dict(pool.sample_counts) == {0: 100, 1: 100, 2: 100}
    [anomaly] = [e for e in ledger.events if e.kind == "anomaly"]
    assert anomaly.client_id == 0 and anomaly.message.endswith("keeping the lowest, 100")


def test_a_rejoin_claiming_fewer_samples_lowers_the_count(monkeypatch):
    counts = FirstCounts()
    _admit(monkeypatch, {0: 4_000, 1: 300}, DeclaredSizes(), counts)
    again, [(client, said)] = _admit(monkeypatch, {0: 400, 1: 300}, DeclaredSizes(), counts)
    assert again == {0: 400, 1: 300} and client == 0 and "keeping the lowest, 400" in said
    later, _ = _admit(monkeypatch, {0: 4_000, 1: 300}, DeclaredSizes(), counts)
    assert later == {0: 400, 1: 300}  # claiming more again buys nothing back
