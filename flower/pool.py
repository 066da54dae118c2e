"""The ClientPool adapter for a real federation: instructions become Flower Messages.

The methods in strategies/ call ``send`` exactly as in the in-process runtime. This adapter
adds what only a real federation needs: mapping client ids to Flower node ids, attaching
peer addresses and coordinator-signed grants to COLLABORATE instructions, polling for
replies with a deadline, and turning silence or errors into recorded events instead of
hangs. A client that does not answer in time is simply absent from that round's replies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from collabfl.coordinator.state import Member
from collabfl.flower.codec import (
    decode_reply,
    encode_instruction,
    message_type,
)
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Collaborate

log = logging.getLogger(__name__)


GrantIssuer = Callable[[int, Sequence[int], int], Mapping[int, bytes]]
"""(fetcher, owners, round) -> grant token per owner."""

EventSink = Callable[[int, str, int, str], None]
"""(round, kind, client_id, message): where faults are reported."""

Admitter = Callable[[Sequence[int]], list[Member]]
"""Sends the run's set-up to new Flower nodes and returns the members they turned out to be."""


class FlowerClientPool:
    """Sends instructions through a Flower Grid and collects the replies."""

    def __init__(
        self,
        grid: Grid,
        members: Sequence[Member],
        issue_grants: GrantIssuer,
        on_event: EventSink,
        admit: Admitter,
        timeout_s: float = 600.0,
        poll_s: float = 0.25,
        refused: Callable[[Collection[int]], Collection[int]] = lambda online: (),
    ) -> None:
        self.grid = grid
        self.members: dict[int, Member] = {}
        self.by_node: dict[int, int] = {}
        for member in members:
            self._add(member)
        self.admit = admit
        self.issue_grants = issue_grants
        self.on_event = on_event
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.refused = refused
        """Given the nodes online, those the run's binding refuses (flower/binding.py): they
        are not offered set-up again."""

    @property
    def sample_counts(self) -> Mapping[int, int]:
        return {k: m.num_samples for k, m in self.members.items()}

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        round_index = next(iter(instructions.values())).round if instructions else -1
        online = self.refresh()
        messages = []
        for client_id, instruction in instructions.items():
            member = self.members.get(client_id)
            if member is None:
                continue
            if member.flower_node_id not in online:
                self.on_event(round_index, "offline", client_id, "node is offline; skipped")
                continue
            if isinstance(instruction.task, Collaborate):
                task = self._with_peer_access(client_id, instruction.round, instruction.task)
                instruction = replace(instruction, task=task)
            messages.append(
                Message(
                    encode_instruction(instruction),
                    dst_node_id=member.flower_node_id,
                    message_type=message_type(instruction.verb),
                    group_id=str(instruction.round),
                )
            )
        replies = {}
        for client_id, content in exchange(
            self.grid, messages, self.timeout_s, self.poll_s
        ).items():
            sender = self.by_node.get(client_id)
            if sender is None:
                continue
            if isinstance(content, str):
                self.on_event(round_index, "client_error", sender, content)
                continue
            try:
                replies[sender] = reply = decode_reply(content)
            except ValueError as error:
                self.on_event(round_index, "bad_reply", sender, str(error))
                continue
            for reason in reply.metrics.skipped_peers or ():
                self.on_event(round_index, "peer_skipped", sender, reason)
        for message in messages:
            client_id = self.by_node[message.metadata.dst_node_id]
            if client_id not in replies:
                self.on_event(round_index, "no_reply", client_id, "no valid reply in time")
        return dict(sorted(replies.items()))  # arrival order must not leak into the method

    def refresh(self) -> set[int]:
        """Admit nodes that appeared since the last message (new or restarted clients).

        A restarted client daemon comes back as a new Flower node with the same client id;
        it takes over that member's place. Returns the node ids online now.
        """
        online = set(self.grid.get_node_ids())
        new = sorted(online - set(self.by_node) - set(self.refused(online)))
        if new:
            for member in self.admit(new):
                self._add(member)
        return online

    def _add(self, member: Member) -> None:
        previous = self.members.get(member.client_id)
        if previous is not None:
            self.by_node.pop(previous.flower_node_id, None)
            log.info("client %s rejoined as node %s", member.client_id, member.flower_node_id)
        self.members[member.client_id] = member
        self.by_node[member.flower_node_id] = member.client_id

    def _with_peer_access(self, client_id: int, round_index: int, task: Collaborate) -> Collaborate:
        """Attach owners' addresses and grants; unknown peers are dropped from the list."""
        known = tuple(j for j in task.candidates if j in self.members)
        weights = dict(zip(task.candidates, task.weights, strict=True))
        grants = self.issue_grants(client_id, known, round_index) if known else {}
        return replace(
            task,
            candidates=known,
            weights=tuple(weights[j] for j in known),
            peer_addresses=tuple(self.members[j].peer_address for j in known),
            peer_grants=tuple(grants[j] for j in known),
        )


def exchange(
    grid: Grid, messages: list[Message], timeout_s: float, poll_s: float
) -> dict[int, RecordDict | str]:
    """Push messages and poll for replies until all arrive or the deadline passes.

    Returns reply content per source node id, or the error text for replies that carry an
    error. Flower's own send_and_receive sleeps 3 s between polls; rounds here are short.
    """
    pending = set(grid.push_messages(messages))
    deadline = time.monotonic() + timeout_s
    replies: dict[int, RecordDict | str] = {}
    while pending and time.monotonic() < deadline:
        for reply in grid.pull_messages(list(pending)):
            pending.discard(reply.metadata.reply_to_message_id)
            source = reply.metadata.src_node_id
            if reply.has_error():
                replies[source] = f"error {reply.error.code}: {reply.error.reason}"
            else:
                replies[source] = reply.content
        if pending:
            time.sleep(poll_s)
    return replies
