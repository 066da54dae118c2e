"""The Flower pool: one message per client per round, and no peer waited on in vain.

A scripted Grid stands in for Flower's (the real one is exercised by the federation tests):
it answers each program with one reply per step, except from nodes the test made hang.
"""

from __future__ import annotations

import pytest
from flwr.app import Message
from flwr.supercore.task_identity import TaskIdentity

from collabfl.coordinator.state import Member
from collabfl.flower.codec import PROGRAM_MESSAGE, decode_program, encode_replies
from collabfl.flower.fleet_signals import Polling
from collabfl.flower.pool import FlowerClientPool
from collabfl.flower.timing import MessageTiming
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Collaborate, Evaluate, Train


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
        self.sent: list[Message] = []
        self.replies: dict[str, Message] = {}

    def get_node_ids(self) -> list[int]:
        return sorted(self.online)

    def push_messages(self, messages: list[Message]) -> list[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id
            self.sent.append(message)
            ids.append(message.metadata.message_id)
            if message.metadata.dst_node_id not in self.hung:
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


def _pool(grid: ScriptedGrid, events: list, timings: list) -> FlowerClientPool:
    members = [Member(k, 10 + k, f"h:{9200 + k}", 100) for k in range(3)]
    return FlowerClientPool(
        grid,
        members,
        lambda fetcher, owners, round_index: {j: b"grant" for j in owners},
        lambda round_index, kind, client, text: events.append((round_index, kind, client)),
        lambda nodes: [],
        timeout_s=0.3,
        signals=Polling(0.01),
        on_timing=timings.append,
    )


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
    grid, events, timings = ScriptedGrid(), [], []
    answered = _pool(grid, events, timings).send_programs(_round(0))
    assert sorted(answered) == [0, 1, 2] and all(len(r) == 3 for r in answered.values())
    assert len(grid.sent) == 3 and events == []
    task = _collaborate_sent(grid, 10)
    assert task.candidates == (1, 2) and task.peer_addresses == ("h:9201", "h:9202")
    assert task.peer_grants == (b"grant", b"grant") and task.peer_wait_s == pytest.approx(0.15)
    assert sorted(t.client for t in timings) == [0, 1, 2]
    assert all(isinstance(t, MessageTiming) and t.steps == 3 for t in timings)
    assert all(t.to_client_s + t.work_s == pytest.approx(5.0) for t in timings)


def test_a_client_that_went_silent_is_nobodys_peer_until_it_answers_again():
    grid, events, timings = ScriptedGrid(), [], []
    pool = _pool(grid, events, timings)
    grid.hung.add(12)
    assert sorted(pool.send_programs(_round(0))) == [0, 1]
    assert (0, "no_reply", 2) in events
    pool.send_programs(_round(1))
    assert _collaborate_sent(grid, 10).candidates == (1,)
    assert _collaborate_sent(grid, 11).candidates == (0,)
    grid.hung.clear()  # it answers round 2 (its program was sent: it is still a member)
    assert sorted(pool.send_programs(_round(2))) == [0, 1, 2]
    pool.send_programs(_round(3))
    assert _collaborate_sent(grid, 10).candidates == (1, 2)


def test_an_offline_client_is_skipped_and_nobodys_peer():
    grid, events, timings = ScriptedGrid(), [], []
    grid.online.discard(11)
    answered = _pool(grid, events, timings).send_programs(_round(0))
    assert sorted(answered) == [0, 2] and (0, "offline", 1) in events
    program = decode_program(grid.sent[0].content)
    assert program[1].task.candidates == (2,)
