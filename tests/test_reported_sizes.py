"""A participant who lies about its sample count (issue #30, finding 3).

A size report outside the operator's declared size is replaced by the declared one with an
``anomaly`` event naming the member; in a real federation no member weighs more than the
share cap in anything computed from sizes (FedAvg's average, DPFL's p_j, pFedGraph's graph,
FedCollab's coalitions, iPFL's market), whatever it reports. The last test runs a real
federation (coordinator daemon, SuperLink, client daemons) whose operator declared a size
the client's data does not have.

Before: the set-up reply's count was taken as told (checked only for >= 0), and a client
claiming 100 times its data got 98 % of FedAvg's average.
"""

from __future__ import annotations

import pytest
import torch
from federation_faults import make_federation, wait_for
from support.ledger import FakeLedger

from collabfl.apps import server_app
from collabfl.apps.fleet_signals import POLLING
from collabfl.apps.pool import FlowerClientPool
from collabfl.coordinator.store.state import Member
from collabfl.engine.config import ConfigError, validate_config
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.run_options import RunOptions
from collabfl.flower.binding import NodeBinder
from collabfl.flower.reported_sizes import DeclaredSizes, capped_counts, share_cap
from collabfl.flower.run_consistency import FirstCounts
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Reply
from collabfl.strategies.rounds import average_replies
from tests.test_node_binding import Grid, flower_task  # noqa: F401  (autouse fixture)
from tests.test_session import _settings

pytestmark = pytest.mark.federation


def _members(counts: dict[int, int]) -> list[Member]:
    return [Member(k, 10 + k, f"h:{k}", n) for k, n in counts.items()]


def _admit(
    monkeypatch,
    reported: dict[int, int],
    declared: DeclaredSizes,
    counts: FirstCounts | None = None,
):
    """Run the ServerApp's admission on set-up replies claiming ``reported`` samples
    (``counts``: the run's first counts so far, as a rejoin meets them)."""
    from collabfl.apps.exchange import Answer
    from collabfl.apps.run_setup import Description, encode_description

    def exchange(grid, messages, timeout_s, signals):
        answers = {}
        for m in messages:
            client = m.metadata.dst_node_id - 10
            described = Description(client, reported[client], 10, f"h:{client}")
            answers[m.metadata.dst_node_id] = Answer(encode_description(described), 0, 0, 0)
        return answers

    monkeypatch.setattr(server_app, "exchange", exchange)
    ledger = FakeLedger()
    gate = server_app.Gate(NodeBinder({}), ledger, declared, counts or FirstCounts())
    nodes = [10 + k for k in reported]
    members, _, _ = server_app.admit(Grid(set(nodes)), nodes, _settings(), gate, 1.0, POLLING)
    anomalies = [(e.client_id, e.message) for e in ledger.events if e.kind == "anomaly"]
    return {m.client_id: m.num_samples for m in members}, anomalies


def test_a_size_outside_its_declared_range_is_replaced_and_recorded(monkeypatch):
    declared = DeclaredSizes({0: 400, 1: 400}, tolerance=0.1)
    counts, anomalies = _admit(monkeypatch, {0: 40_000, 1: 420, 2: 380}, declared)
    assert counts == {0: 400, 1: 420, 2: 380}  # 1 is inside ±10 %; 2 has no declared size
    [(client, message)] = anomalies
    assert client == 0
    assert "reported 40000 training samples" in message and "declared 400" in message


def test_no_member_weighs_more_than_the_cap_in_a_federation_average():
    """FedAvg's average, as every method's sizes, reads the pool's counts: a liar at 100×
    its data weighs at most the cap (auto: 60 % with three members), not 98 %."""
    pool = FlowerClientPool(Grid(set()), _members({0: 40_000, 1: 400, 2: 300}), FakeLedger())
    replies = {k: Reply(ClientMetrics(), torch.eye(3)[k]) for k in range(3)}
    weights = average_replies(replies, pool.sample_counts)
    assert weights[0].item() == pytest.approx(0.6, abs=1e-3)
    assert weights[1].item() / weights[2].item() == pytest.approx(400 / 300, rel=1e-3)


def test_honest_sizes_under_the_cap_are_kept():
    counts = {0: 275, 1: 273, 2: 652}  # MNIST-1D Dirichlet α=0.1, 3 clients: 54 % at most
    pool = FlowerClientPool(Grid(set()), _members(counts), FakeLedger())
    assert pool.sample_counts == counts


@pytest.mark.parametrize(
    ("counts", "cap", "expected"),
    [
        ({0: 100, 1: 1, 2: 1}, 0.5, {0: 2, 1: 1, 2: 1}),
        ({0: 1000, 1: 1000, 2: 100, 3: 100}, 0.3, {0: 150, 1: 150, 2: 100, 3: 100}),  # two liars
        ({0: 9, 1: 3}, 0.1, {0: 3, 1: 3}),  # a cap below an equal share: equal weights
        ({0: 5}, 0.2, {0: 5}),
        ({}, 0.5, {}),
    ],
)
def test_capped_counts(counts, cap, expected):
    capped = capped_counts(counts, cap)
    assert capped == expected
    if capped:
        assert max(capped.values()) / sum(capped.values()) <= max(cap, 1 / len(counts)) + 0.02


def test_auto_cap_is_three_equal_shares_at_most_sixty_percent():
    assert [share_cap("auto", n) for n in (1, 2, 3, 10)] == [1.0, 0.6, 0.6, 0.3]
    assert share_cap(1.0, 5) == 1.0 and share_cap(0.1, 4) == 0.25


def test_federation_section_is_checked():
    config = validate_config({"federation": {"declared_sizes": {"0": 400}, "max_share": 0.5}})
    assert config.federation.declared_sizes == {0: 400}
    for bad in ({"declared_sizes": {"0": 0}}, {"max_share": 0}, {"max_share": "most"}):
        with pytest.raises(ConfigError, match="federation"):
            validate_config({"federation": bad})


def test_a_real_federation_replaces_an_undeclared_size_and_caps_shares(tmp_path):
    """Client 0's operator-declared size is 50 while its data file holds hundreds: the run
    registers 50 for it, says so in an ``anomaly`` event, caps client 1 at half the total
    (``max_share = 0.5``) with a ``share_capped`` event, and runs to the end."""
    base, federation = make_federation(tmp_path, clients=2, rounds=1)
    raw = base.model_dump(mode="json")
    raw["federation"] = {"declared_sizes": {"0": 50}, "max_share": 0.5}
    spec = parse_method_spec("fedavg", validate_config(raw))
    options = RunOptions(expected_clients=2, out_dir=str(tmp_path / "out"), message_timeout_s=120)
    with federation:
        with federation.client() as client:
            client.create_run("sizes", spec.label, run_request(spec, options))
        run = wait_for(federation, "sizes", lambda r: not r.active)
        with federation.client() as client:
            events = client.list_events("sizes")
            members = {m.client_id: m.num_samples for m in client.list_members()}
    assert run.status == "finished", run.message
    [anomaly] = [e for e in events if e.kind == "anomaly"]
    assert anomaly.client_id == 0 and anomaly.level == "warning"
    assert "declared 50" in anomaly.message
    assert members[0] == 50 and members[1] > 50
    [capped] = [e for e in events if e.kind == "share_capped"]
    assert capped.client_id == 1 and f"weighs as 50 samples, not {members[1]}" in capped.message
