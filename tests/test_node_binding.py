"""A second node claiming a bound client id is refused (no instruction, no grant) and
recorded; a registered SuperNode key decides which node may be which client."""

from __future__ import annotations

import pytest
from flwr.supercore.task_identity import TaskIdentity
from support.ledger import FakeLedger

from collabfl.apps import server_app
from collabfl.apps.exchange import Answer
from collabfl.apps.fleet_signals import POLLING
from collabfl.apps.pool import FlowerClientPool
from collabfl.apps.run_setup import Description, encode_description
from collabfl.flower.binding import NodeBinder, format_bindings, parse_bindings
from tests.test_session import _settings


@pytest.fixture(autouse=True)
def flower_task(monkeypatch):
    """The identity Flower's ServerApp process sets before it builds any Message."""
    for name, value in (("_task_id", 1), ("_run_id", 7), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)


class Grid:
    """The part of Flower's Grid that admission reads: which nodes are online."""

    def __init__(self, online: set[int]) -> None:
        self.online = online

    def get_node_ids(self) -> list[int]:
        return sorted(self.online)


def _answers(claims: dict[int, int], addresses: dict[int, str] | None = None):
    """Fake set-up replies: node -> the client id it claims (and the peer address it
    advertises; default: one address per node)."""
    addresses = addresses or {}

    def exchange(grid, messages, timeout_s, poll_s):
        answers = {}
        for m in messages:
            node = m.metadata.dst_node_id
            address = addresses.get(node, f"h:{node}")
            content = encode_description(Description(claims[node], 10, 10, address))
            answers[node] = Answer(content, 0.0, 0.0, 0.0)
        return answers

    return exchange


def _gate(binder: NodeBinder, ledger: FakeLedger) -> server_app.Gate:
    return server_app.Gate(binder, ledger)


def _refusals(ledger: FakeLedger) -> list[tuple[int | None, str]]:
    """The ``impostor`` events recorded: (claimed client, why)."""
    return [(e.client_id, e.message) for e in ledger.events if e.kind == "impostor"]


def _pool(grid: Grid, members, gate) -> FlowerClientPool:
    """A pool whose newcomers go through ``gate``'s binding, as in the ServerApp."""
    door = server_app.Door(grid, _settings(), gate, POLLING)
    return FlowerClientPool(grid, members, gate.ledger, door)


def test_impostor_claiming_a_bound_client_id_is_refused_and_recorded(monkeypatch):
    binder = NodeBinder({})
    gate = _gate(binder, ledger := FakeLedger())
    grid = Grid({11, 12})
    monkeypatch.setattr(server_app, "exchange", _answers({11: 0, 12: 1, 99: 1}))
    members, _, _ = server_app.admit(grid, [11, 12], _settings(), gate, 1.0, POLLING)
    assert {m.client_id: m.flower_node_id for m in members} == {0: 11, 1: 12}

    grid.online.add(99)  # a second daemon started with --client-id 1 mid-run
    pool = _pool(grid, members, gate)
    assert pool.refresh() == {11, 12, 99}
    assert pool.members[1].flower_node_id == 12 and 99 not in pool.by_node
    assert _refusals(ledger) == [(1, "node 99 claims client 1, which node 12 holds")]
    pool.refresh()  # refused while node 12 is online: not offered set-up (nor recorded) again
    assert len(ledger.events) == 1


def test_restarted_daemon_refused_while_its_old_node_lingers_joins_once_it_is_gone(monkeypatch):
    """A killed daemon's old node can still count as online when the new one first claims."""
    binder = NodeBinder({})
    gate = _gate(binder, ledger := FakeLedger())
    grid = Grid({11, 12})
    monkeypatch.setattr(server_app, "exchange", _answers({11: 0, 12: 1, 13: 1}))
    members, _, _ = server_app.admit(grid, [11, 12], _settings(), gate, 1.0, POLLING)
    pool = _pool(grid, members, gate)
    grid.online.add(13)  # client 1 restarted; its old node 12 has not timed out yet
    pool.refresh()
    assert pool.members[1].flower_node_id == 12 and len(ledger.events) == 1
    grid.online.discard(12)  # the SuperLink notices node 12 is gone
    pool.refresh()
    assert pool.members[1].flower_node_id == 13 and 13 in pool.by_node
    assert len(ledger.events) == 1  # the takeover itself is not an impostor
    assert [[m.flower_node_id for m in joined] for joined in ledger.members] == [[13]]


def test_restarted_daemon_takes_over_once_its_old_node_is_offline(monkeypatch):
    binder = NodeBinder({})
    gate = _gate(binder, ledger := FakeLedger())
    monkeypatch.setattr(server_app, "exchange", _answers({11: 0, 13: 0}))
    server_app.admit(Grid({11}), [11], _settings(), gate, 1.0, POLLING)
    members, _, _ = server_app.admit(Grid({13}), [13], _settings(), gate, 1.0, POLLING)
    assert [m.flower_node_id for m in members] == [13] and ledger.events == []


def test_restarted_daemon_at_the_same_address_takes_over_at_once(monkeypatch):
    binder = NodeBinder({})
    gate = _gate(binder, ledger := FakeLedger())
    same = {12: "lab-b:9200", 13: "lab-b:9200"}
    monkeypatch.setattr(server_app, "exchange", _answers({11: 0, 12: 1, 13: 1}, same))
    server_app.admit(Grid({11, 12}), [11, 12], _settings(), gate, 1.0, POLLING)
    members, _, _ = server_app.admit(Grid({11, 12, 13}), [13], _settings(), gate, 1.0, POLLING)
    assert [(m.client_id, m.flower_node_id) for m in members] == [(1, 13)] and ledger.events == []


def test_registered_key_decides_which_node_is_which_client(monkeypatch):
    binder = NodeBinder({11: 0, 12: 1})
    gate = _gate(binder, ledger := FakeLedger())
    monkeypatch.setattr(server_app, "exchange", _answers({11: 0, 12: 0, 13: 1}))
    members, _, _ = server_app.admit(
        Grid({11, 12, 13}), [11, 12, 13], _settings(), gate, 1.0, POLLING
    )
    assert [(m.client_id, m.flower_node_id) for m in members] == [(0, 11)]
    [(first, said_first), (second, said_second)] = _refusals(ledger)
    assert (first, second) == (0, 1)
    assert said_first.startswith("node 12 ") and "registered as 1" in said_first
    assert said_second.startswith("node 13 ") and "no registered key" in said_second


def test_bindings_round_trip_and_reject_junk():
    assert parse_bindings(format_bindings({11: 0, 12: 1})) == {11: 0, 12: 1}
    assert parse_bindings("") == {}
    with pytest.raises(ValueError):
        parse_bindings("11=0")
