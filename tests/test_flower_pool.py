"""The Flower pool: one message per client per round, and no peer waited on in vain.

A scripted Grid stands in for Flower's (the real one is exercised by the federation tests):
it answers each program with one reply per step, except from nodes the test made hang.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from flwr.app import Message
from flwr.server.superlink.linkstate.utils import create_message_error_unavailable_res_message
from flwr.supercore.inflatable.inflatable_utils import ObjectPullError
from flwr.supercore.task_identity import TaskIdentity
from support.ledger import FakeLedger

from collabfl.apps import exchange as exchange_module
from collabfl.apps import pool as pool_module
from collabfl.apps.fleet_signals import Polling
from collabfl.apps.pool import NOTICES, FlowerClientPool
from collabfl.apps.substeps import SessionEnd
from collabfl.apps.timing import MessageTiming
from collabfl.coordinator.store.state import Member
from collabfl.flower.codec import PROGRAM_MESSAGE, decode_program, encode_replies
from collabfl.flower.reply_pull import NODE_GONE, lost_content, pull_replies
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Collaborate, Discriminate, Evaluate, Train


@pytest.fixture(autouse=True)
def flower_task(monkeypatch):
    """The identity Flower's ServerApp process sets before it builds any Message."""
    for name, value in (("_task_id", 1), ("_run_id", 7), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)


class ScriptedGrid:
    """Nodes 10, 11, 12 answer every program at once, unless hung; records what was sent."""

    def __init__(self) -> None:
        self.online = {10, 11, 12}
        self.hung: set[int] = set()
        self.gone: set[int] = set()
        """Nodes that go offline holding their message: the SuperLink answers for them."""
        self.sent: list[Message] = []
        self.replies: dict[str, Message] = {}
        self.node_reads = 0
        """How often the pool asked for the online nodes."""

    def get_node_ids(self) -> list[int]:
        self.node_reads += 1
        return sorted(self.online)

    def push_messages(self, messages: list[Message]) -> list[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id
            self.sent.append(message)
            ids.append(message.metadata.message_id)
            if message.metadata.dst_node_id in self.gone:
                gone = create_message_error_unavailable_res_message(
                    message.metadata, "node_unavail"
                )
                self.replies[message.metadata.message_id] = gone
                self.online.discard(message.metadata.dst_node_id)
            elif message.metadata.dst_node_id not in self.hung:
                assert message.metadata.message_type == PROGRAM_MESSAGE
                steps = decode_program(message.content)
                content = encode_replies([Reply() for _ in steps])
                reply = Message(content, reply_to=message)
                # as if the client had answered 5 s after the message was made
                reply.metadata.__dict__["_created_at"] = message.metadata.created_at + 5.0
                self.replies[message.metadata.message_id] = reply
        return ids

    def pull_messages(self, ids: list[str]) -> list[Message]:
        return [self.replies.pop(i) for i in ids if i in self.replies]


def _pool(
    grid: ScriptedGrid, ledger: FakeLedger, timings: list, relay: EchoRelay | None = None
) -> FlowerClientPool:
    members = [Member(k, 10 + k, f"h:{9200 + k}", 100) for k in range(3)]
    return FlowerClientPool(
        grid,
        members,
        ledger,
        timeout_s=0.3,
        signals=Polling(0.01),
        on_timing=timings.append,
        relay=relay,  # type: ignore[arg-type]
    )


class EchoRelay:
    """Stands in for the sub-step relay: every seated client answers each step at once."""

    round = 0

    def __init__(self) -> None:
        self.steps: list[dict[int, int]] = []
        self.gone: set[int] = set()
        """Clients whose seat's node went offline: the SuperLink's error is their outcome."""
        self.lost: set[int] = set()
        """Clients whose seat's reply lost its content on the way (its node killed)."""

    def send(self, instructions: dict[int, Instruction], nodes: dict[int, int]) -> dict:
        self.steps.append(dict(nodes))
        gone, lost = f"{NODE_GONE} node_unavail", lost_content(ObjectPullError("a", "timeout"))
        return {
            k: gone if k in self.gone else lost if k in self.lost else Reply() for k in instructions
        }

    def close(self) -> SessionEnd:
        return SessionEnd({}, [])


def _substep(step: int) -> dict[int, Instruction]:
    task = Discriminate((1,), (1,), samples=10, step=step, local_steps=1, lr=0.1,
                        batch_size=4, hidden=2)  # fmt: skip
    return {k: Instruction(0, task) for k in range(3)}


def _round(t: int) -> dict[int, list[Instruction]]:
    return {
        k: [
            Instruction(t, Train(1.0, publish=True)),
            Instruction(t, Collaborate("greedy", tuple(j for j in range(3) if j != k), (1.0, 1.0))),
            Instruction(t, Evaluate()),
        ]
        for k in range(3)
    }


def _collaborate_sent(grid: ScriptedGrid, node: int) -> Collaborate:
    program = decode_program(grid.sent[-3 + node - 10].content)
    task = program[1].task
    assert isinstance(task, Collaborate)
    return task


def test_each_client_gets_its_round_as_one_message_with_peer_access():
    grid, ledger, timings = ScriptedGrid(), FakeLedger(), []
    answered = _pool(grid, ledger, timings).send_programs(_round(0))
    assert sorted(answered) == [0, 1, 2] and all(len(r) == 3 for r in answered.values())
    assert len(grid.sent) == 3 and ledger.events == []
    task = _collaborate_sent(grid, 10)
    assert task.candidates == (1, 2) and task.peer_addresses == ("h:9201", "h:9202")
    assert task.peer_grants == (b"0->1@0", b"0->2@0") and task.peer_wait_s == pytest.approx(0.15)
    assert sorted(t.client for t in timings) == [0, 1, 2]
    assert all(isinstance(t, MessageTiming) and t.steps == 3 for t in timings)
    assert all(t.to_client_s + t.work_s == pytest.approx(5.0) for t in timings)


def test_a_rounds_grants_go_out_in_one_ledger_call():
    """Every COLLABORATE step of a round gets its grants from one call to the run's ledger
    (one coordinator RPC), not one per fetcher; owners are the peers each step keeps."""
    grid, ledger = ScriptedGrid(), FakeLedger()
    pool = _pool(grid, ledger, [])
    grid.hung.add(12)
    pool.send_programs(_round(0))
    assert ledger.grant_calls == [(0, {0: [1, 2], 1: [0, 2], 2: [0, 1]})]
    pool.send_programs(_round(1))  # client 2 went silent: nobody is granted its model
    assert ledger.grant_calls[1:] == [(1, {0: [1], 1: [0], 2: [0, 1]})]
    pool.send_programs(
        {k: [Instruction(2, Train(1.0)), Instruction(2, Evaluate())] for k in range(3)}
    )
    assert len(ledger.grant_calls) == 2  # no COLLABORATE step: no call


def test_a_client_that_went_silent_is_nobodys_peer_until_it_answers_again():
    grid, ledger, timings = ScriptedGrid(), FakeLedger(), []
    pool = _pool(grid, ledger, timings)
    grid.hung.add(12)
    assert sorted(pool.send_programs(_round(0))) == [0, 1]
    assert (0, "no_reply", 2) in ledger.seen()
    pool.send_programs(_round(1))
    assert _collaborate_sent(grid, 10).candidates == (1,)
    assert _collaborate_sent(grid, 11).candidates == (0,)
    grid.hung.clear()  # it answers round 2 (its program was sent: it is still a member)
    assert sorted(pool.send_programs(_round(2))) == [0, 1, 2]
    pool.send_programs(_round(3))
    assert _collaborate_sent(grid, 10).candidates == (1, 2)


def test_a_client_whose_node_went_offline_mid_round_is_skipped_as_offline_with_its_reason():
    """The SuperLink answers for a node that went offline holding its message (its source is
    the SuperLink, not the node): that client is recorded as offline, not as silent, and the
    others' replies are kept."""
    grid, ledger, timings = ScriptedGrid(), FakeLedger(), []
    pool = _pool(grid, ledger, timings)
    grid.gone.add(12)
    assert sorted(pool.send_programs(_round(0))) == [0, 1]
    assert [e for e in ledger.seen() if e[2] == 2] == [(0, "offline", 2)]
    assert sorted(pool.send_programs(_round(1))) == [0, 1]
    assert [m.metadata.dst_node_id for m in grid.sent[-2:]] == [10, 11]
    program = decode_program(grid.sent[-2].content)
    assert program[1].task.candidates == (1,)  # nobody waits for its model
    grid.gone.clear()
    grid.online.add(12)  # restarted
    assert sorted(pool.send_programs(_round(2))) == [0, 1, 2]
    assert (2, "rejoined", 2) in ledger.seen()


def test_a_reply_whose_content_never_arrived_is_no_reply_not_a_failed_step(monkeypatch):
    """Every client SIGKILLed at once (issue #32's soak): a SuperNode killed while pushing its
    reply leaves the message at the SuperLink without its content. That reply is lost on the
    way, like an offline node's: one ``no_reply`` event saying so, and no failed step (a
    step failed on every client ends the run ``failed``)."""
    grid, ledger, timings = ScriptedGrid(), FakeLedger(), []
    pool = _pool(grid, ledger, timings)
    lost = {10, 11, 12}

    def pull_losing_content(grid, message_ids):
        return [
            replace(p, content=lost_content(ObjectPullError("dba6", "retry limit reached")))
            if p.src_node_id in lost
            else p
            for p in pull_replies(grid, message_ids)
        ]

    monkeypatch.setattr(exchange_module, "pull_replies", pull_losing_content)
    assert pool.send_programs(_round(0)) == {}
    assert sorted(ledger.seen()) == [(0, "no_reply", 0), (0, "no_reply", 1), (0, "no_reply", 2)]
    assert pool.step_ledger.take() == []
    assert pool.silent == {0, 1, 2}  # nobody waits for their models until they answer
    lost.clear()
    assert sorted(pool.send_programs(_round(1))) == [0, 1, 2]


def test_an_offline_client_is_skipped_and_nobodys_peer():
    grid, ledger, timings = ScriptedGrid(), FakeLedger(), []
    grid.online.discard(11)
    answered = _pool(grid, ledger, timings).send_programs(_round(0))
    assert sorted(answered) == [0, 2] and (0, "offline", 1) in ledger.seen()
    program = decode_program(grid.sent[0].content)
    assert program[1].task.candidates == (2,)


def test_a_client_back_after_being_skipped_as_offline_is_recorded_as_rejoined():
    grid, ledger, timings = ScriptedGrid(), FakeLedger(), []
    pool = _pool(grid, ledger, timings)
    grid.online.discard(11)
    pool.send_programs(_round(0))
    pool.send_programs(_round(1))
    assert [e for e in ledger.seen() if e[2] == 1] == [(0, "offline", 1), (1, "offline", 1)]
    grid.online.add(11)
    assert sorted(pool.send_programs(_round(2))) == [0, 1, 2]
    pool.send_programs(_round(3))
    rejoined = [e for e in ledger.events if e.client_id == 1][2:]
    assert [(e.round, e.kind, e.level) for e in rejoined] == [(2, "rejoined", "info")]  # once
    assert "rejoined" in NOTICES  # a notice, not a fault


def test_sub_steps_read_the_online_nodes_once_a_second_not_once_a_step(monkeypatch):
    """Hundreds of sub-steps a round each asking the SuperLink for its nodes put a call in
    every step's path; within ONLINE_FRESH_S the last read stands, and a node that went
    away is skipped once the read is older."""
    grid, ledger, relay = ScriptedGrid(), FakeLedger(), EchoRelay()
    pool = _pool(grid, ledger, [], relay)
    for step in range(5):
        assert sorted(pool.send(_substep(step))) == [0, 1, 2]
    assert grid.node_reads == 1 and len(relay.steps) == 5
    monkeypatch.setattr(pool_module, "ONLINE_FRESH_S", 0.0)  # as if a second went by
    grid.online.discard(11)
    assert sorted(pool.send(_substep(5))) == [0, 2]
    assert grid.node_reads == 2 and (0, "offline", 1) in ledger.seen()
    assert relay.steps[-1] == {0: 10, 2: 12}


def test_a_client_whose_seat_node_went_offline_is_skipped_as_offline_not_as_failed():
    """A relayed step whose seat's node went offline (the daemon marked its killed SuperNode
    offline) is the node's loss, as on the message path: an ``offline`` event, no failure."""
    grid, ledger, relay = ScriptedGrid(), FakeLedger(), EchoRelay()
    pool = _pool(grid, ledger, [], relay)
    relay.gone.add(2)
    assert sorted(pool.send(_substep(0))) == [0, 1]
    assert [e for e in ledger.seen() if e[2] == 2] == [(0, "offline", 2)]
    assert not pool.step_ledger.take()


def test_a_relayed_step_whose_seat_reply_was_lost_is_no_reply_not_a_failure():
    grid, ledger, relay = ScriptedGrid(), FakeLedger(), EchoRelay()
    pool = _pool(grid, ledger, [], relay)
    relay.lost.add(2)
    assert sorted(pool.send(_substep(0))) == [0, 1]
    assert [e for e in ledger.seen() if e[2] == 2] == [(0, "no_reply", 2)]
    assert not pool.step_ledger.take()


def test_below_its_quorum_a_round_waits_for_clients_and_an_operator_may_stop_it(
    monkeypatch,
) -> None:
    """Client 2's node is offline: the round waits (no message sent) until it is back, with
    a pause and a resume said; a second pause ends when the operator's stop is raised."""
    from collabfl.engine import quorum as quorum_module
    from collabfl.engine.driver import RunStopped
    from collabfl.engine.quorum import Quorum

    monkeypatch.setattr(quorum_module, "POLL_S", 0.01)
    grid, looks = ScriptedGrid(), []
    grid.online = {10, 11}

    class Operator(FakeLedger):
        """Client 2 comes back at the third look; the operator stops the run at the fifth."""

        def stop_requested(self) -> bool:
            looks.append(len(grid.sent))
            if len(looks) == 3:
                grid.online.add(12)
            return len(looks) == 5

    def programs(round_index: int) -> dict[int, list[Instruction]]:
        return {k: [Instruction(round_index, Train(1.0))] * 2 for k in range(3)}

    pool = _pool(grid, ledger := Operator(), [])
    pool.quorum = Quorum(3, 60.0)
    assert sorted(pool.send_programs(programs(0))) == [0, 1, 2]
    paused = [(e.kind, e.level) for e in ledger.events]
    assert paused == [("quorum_lost", "warning"), ("quorum_regained", "info")]
    assert looks == [0, 0, 0]
    assert ledger.said == [ledger.events[0].message, ""]  # the status line while paused
    grid.online.discard(12)
    with pytest.raises(RunStopped):
        pool.send_programs(programs(1))
    assert len(grid.sent) == 3 and [e.kind for e in ledger.events[2:]] == ["quorum_lost"]


class CountedSignals:
    """Reply signals as the coordinator service gives them: ``pushed`` answers the replies
    signalled so far; records each wait's ``seen``."""

    def __init__(self, replies_so_far: int) -> None:
        self.replies = replies_so_far
        self.waits: list[int] = []

    def pushed(self) -> int:
        return self.replies

    def await_replies(self, seen: int, timeout_s: float) -> int:
        self.waits.append(seen)
        self.replies += 1  # the hung node's reply never comes; a signal per wait
        return self.replies


def test_a_wait_for_replies_counts_from_the_push_not_from_zero():
    """From 0, every exchange after the first returned from its first wait at once and
    asked the SuperLink for replies once more for nothing."""
    grid = ScriptedGrid()
    grid.hung = {12}
    pool = _pool(grid, FakeLedger(), [])
    pool.signals = signals = CountedSignals(replies_so_far=40)  # earlier rounds' replies
    assert sorted(pool.send_programs(_round(0))) == [0, 1]
    assert signals.waits and signals.waits[0] == 40
