"""The ClientPool adapter for a real federation: instructions become Flower Messages.

The methods in strategies/ call ``send`` (and ``send_programs``: a round's steps as one
message per client) exactly as in the in-process runtime. This adapter adds what only a
real federation needs: mapping client ids to Flower node ids, attaching peer addresses and
coordinator-signed grants to COLLABORATE steps (a round's in one call), polling for replies
with a deadline, timing each message, and turning silence or errors into recorded events
instead of hangs. A client that does not answer in time is simply absent from that round's
replies. What it records and asks of the coordinator goes through the run's ``RunLedger``
(apps/run_ledger.py); newcomers come in through the ServerApp's ``Door``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from collabfl.apps.exchange import exchange
from collabfl.apps.fleet_signals import POLLING, FleetSignals
from collabfl.apps.reply_checks import refusal
from collabfl.apps.run_ledger import Grants, RunLedger
from collabfl.apps.substeps import RelayedSteps, is_substep
from collabfl.apps.timing import MessageTiming, message_timing
from collabfl.coordinator.store.records import Member
from collabfl.engine.driver import RunStopped
from collabfl.engine.quorum import Quorum, await_quorum
from collabfl.engine.step_failures import StepLedger
from collabfl.flower.codec import (
    PROGRAM_MESSAGE,
    decode_replies,
    decode_reply,
    encode_instruction,
    encode_program,
    message_type,
)
from collabfl.flower.reply_pull import content_lost, node_gone
from collabfl.flower.reported_sizes import MaxShare, capped_counts
from collabfl.flower.run_consistency import FirstCounts
from collabfl.strategies.protocol import Instruction, Program, Reply
from collabfl.strategies.verbs import Collaborate

log = logging.getLogger(__name__)


NOTICES = frozenset({"rejoined"})
"""Event kinds that report good news (recorded as info); the others are faults."""


class Door(Protocol):
    """How Flower nodes that appear mid-run become members: the ServerApp's set-up, through
    the run's node binding."""

    def admit(self, nodes: Sequence[int]) -> list[Member]:
        """Send the run's set-up to new ``nodes``; the members they turned out to be."""

    def refused(self, online: Collection[int]) -> Collection[int]:
        """Of the nodes ``online``, those the binding refuses: not offered set-up again."""


class ClosedDoor:
    """Nobody joins mid-run: a pool of fixed members (in-memory grids in tests)."""

    def admit(self, nodes: Sequence[int]) -> list[Member]:
        return []

    def refused(self, online: Collection[int]) -> Collection[int]:
        return ()


CLOSED = ClosedDoor()

LOST_WITH_NODE = "node went offline during the step; its reply is lost; skipped"
NO_REPLY = "no valid reply in time"

ONLINE_FRESH_S = 1.0
"""How long a sub-round step trusts the online nodes last read from the SuperLink. Asking
again for every step (FedCollab's estimation takes hundreds) put a SuperLink call in each
step's path; and the SuperLink's own view of a node that went away lags by its heartbeat
timeout, far longer than this."""


class FlowerClientPool:
    """Sends instructions through a Flower Grid and collects the replies."""

    def __init__(
        self,
        grid: Grid,
        members: Sequence[Member],
        ledger: RunLedger,
        door: Door = CLOSED,
        timeout_s: float = 600.0,
        signals: FleetSignals = POLLING,
        on_timing: Callable[[MessageTiming], None] = lambda timing: None,
        relay: RelayedSteps | None = None,
        quorum: Quorum | None = None,
        max_share: MaxShare = "auto",
        first_counts: FirstCounts | None = None,
    ) -> None:
        self.grid = grid
        self.members: dict[int, Member] = {}
        self.by_node: dict[int, int] = {}
        for member in members:
            self._add(member)
        self.ledger = ledger
        """The run's events, members, grants and stop requests (apps/run_ledger.py)."""
        self.door = door
        self.timeout_s = timeout_s
        self.signals = signals
        """When to pull replies (apps/fleet_signals.py)."""
        self.on_timing = on_timing
        """Where each answered message's timing goes (the run's messages.jsonl)."""
        self.relay = relay
        """Carries sub-round steps (apps/substeps.py); None: they go as messages too."""
        self.max_share = max_share
        """The most one member weighs in anything computed from sizes (reported_sizes.py)."""
        self.first_counts = first_counts or FirstCounts()
        """Each member's first reported count in the run: training replies are held to it
        (run_consistency.py)."""
        self.step_ledger = StepLedger()
        """Which steps failed on clients, for the round driver."""
        self.quorum = quorum
        """Below it, a step waits for members to come back (engine/quorum.py); None:
        it goes to whoever is online; an operator's stop ends the wait (RunStopped)."""
        self._online: tuple[float, set[int]] = (float("-inf"), set())
        """When ``refresh`` last read the online nodes (monotonic seconds), and what it read."""
        self.silent: set[int] = set()
        """Clients whose last message got no valid reply: no peer waits for their models
        until they answer again (a hung client must not hold up everyone's round)."""
        self.offline: set[int] = set()
        """Members skipped as offline and not seen online since: their return is an event."""

    @property
    def sample_counts(self) -> Mapping[int, int]:
        """The members' admitted counts, capped: every method reads sizes here, so none
        lets one member outweigh the cap whatever it reported."""
        return capped_counts({k: m.num_samples for k, m in self.members.items()}, self.max_share)

    def send(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        if self.relay is not None and is_substep(instructions):
            return self._send_relayed(instructions)
        answered = self.send_programs({k: [ins] for k, ins in instructions.items()})
        return {k: replies[0] for k, replies in answered.items()}

    def send_programs(self, programs: Mapping[int, Program]) -> dict[int, list[Reply]]:
        """One message per client: a lone step as its verb's message, more as a program."""
        round_index = next(iter(programs.values()))[0].round if programs else -1
        self.close_relay()
        online = self._with_quorum(self.refresh(), round_index)
        messages, steps = [], {}
        reachable = self._reachable(programs, online, round_index)
        grants = self._grants(programs, reachable, online)
        for client_id, node in reachable.items():
            program = [
                self._with_peer_access(client_id, s, online, grants) for s in programs[client_id]
            ]
            steps[node] = len(program)
            messages.append(_message(program, node))
            self.step_ledger.sent({client_id: program})
        replies: dict[int, list[Reply]] = {}
        unanswered: dict[int, str] = {}  # why a client has no reply, when more is known
        explained: set[int] = set()  # no reply, and an event of its own already says why
        for node, answer in exchange(self.grid, messages, self.timeout_s, self.signals).items():
            sender = self.by_node.get(node)
            if sender is None:
                continue
            if node_gone(answer.content):  # not an error of the client's: skipped
                self.offline.add(sender)
                self._event(round_index, "offline", sender, LOST_WITH_NODE)
                continue
            if content_lost(answer.content):  # lost on the way (its node died sending it)
                unanswered[sender] = _lost(answer.content)
                continue
            if isinstance(answer.content, str):
                self._event(round_index, "client_error", sender, answer.content)
                self.step_ledger.failed(round_index, sender, answer.content)
                explained.add(sender)
                continue
            try:
                decoded = _decode(answer.content, steps[node])
            except ValueError as error:
                self._event(round_index, "bad_reply", sender, str(error))
                explained.add(sender)
                continue
            if self._refused(sender, zip(programs[sender], decoded, strict=True)):
                explained.add(sender)
                continue
            replies[sender] = decoded
            self.on_timing(message_timing(round_index, sender, answer, replies[sender]))
            for reply in replies[sender]:
                for reason in reply.metrics.skipped_peers or ():
                    self._event(round_index, "peer_skipped", sender, reason)
        for message in messages:
            client_id = self.by_node[message.metadata.dst_node_id]
            if client_id in self.offline:
                self.silent.add(client_id)
            elif client_id in replies:
                self.silent.discard(client_id)
            else:
                self.silent.add(client_id)
                if client_id not in explained:
                    why = unanswered.get(client_id, NO_REPLY)
                    self._event(round_index, "no_reply", client_id, why)
        return dict(sorted(replies.items()))  # arrival order must not leak into the method

    def close_relay(self) -> None:
        """End the relay session, if one is open, before anything else reaches its clients."""
        if self.relay is None:
            return
        round_index = self.relay.round
        ended = self.relay.close()
        for client, error in ended.failed.items():
            self._event(round_index, "client_error", client, f"relay seat: {error}")
            self.step_ledger.failed(round_index, client, f"relay seat: {error}")
        for timing in ended.timings:
            self.on_timing(timing)

    def _send_relayed(self, instructions: Mapping[int, Instruction]) -> dict[int, Reply]:
        """Sub-round steps through the relay (same replies, events and silences as
        messages)."""
        assert self.relay is not None
        round_index = next(iter(instructions.values())).round
        read_at, online = self._online
        if time.monotonic() - read_at > ONLINE_FRESH_S:
            online = self.refresh()
        online = self._with_quorum(online, round_index)
        nodes = self._reachable(instructions, online, round_index)
        reachable = {k: ins for k, ins in instructions.items() if k in nodes}
        self.step_ledger.sent({k: [ins] for k, ins in reachable.items()})
        outcomes = self.relay.send(reachable, nodes) if reachable else {}
        replies: dict[int, Reply] = {}
        for client_id in sorted(reachable):
            outcome = outcomes.get(client_id)
            if isinstance(outcome, Reply) and self._refused(
                client_id, [(reachable[client_id], outcome)]
            ):
                outcome = None
            if isinstance(outcome, Reply):
                replies[client_id] = outcome
                self.silent.discard(client_id)
                continue
            self.silent.add(client_id)
            if outcome is None:
                self._event(round_index, "no_reply", client_id, NO_REPLY)
            elif node_gone(outcome):  # its seat's node went offline: skipped, as on messages
                self.offline.add(client_id)
                self._event(round_index, "offline", client_id, LOST_WITH_NODE)
            elif content_lost(outcome):  # its seat's reply was lost on the way
                self._event(round_index, "no_reply", client_id, _lost(outcome))
            else:  # the step raised on the client
                self._event(round_index, "client_error", client_id, outcome)
                self.step_ledger.failed(round_index, client_id, outcome)
        return replies

    def _with_quorum(self, online: set[int], round_index: int) -> set[int]:
        """``online``, or, while fewer members than the quorum are in it, the nodes online
        once enough are back (QuorumLost when they are not back in time)."""
        if self.quorum is None:
            return online

        def members_in(nodes: set[int]) -> set[int]:
            return {k for k, m in self.members.items() if m.flower_node_id in nodes}

        def recheck() -> set[int]:
            nonlocal online
            if self.ledger.stop_requested():
                raise RunStopped
            online = self.refresh()
            return members_in(online)

        await_quorum(
            self.quorum, self.members.keys(), members_in(online), recheck, round_index,
            self._pause,
        )  # fmt: skip
        return online

    def _pause(self, kind: str, message: str) -> None:
        """A pause below the quorum ("quorum_lost") and its end: an event, and the run's
        status line while it lasts."""
        lost = kind == "quorum_lost"
        self.ledger.record_event(kind, message, "warning" if lost else "info")
        self.ledger.say(message if lost else "")

    def _event(self, round_index: int, kind: str, client_id: int, message: str) -> None:
        """A fault of a client's (a warning), or a notice (NOTICES: info)."""
        level = "info" if kind in NOTICES else "warning"
        self.ledger.record_event(kind, message, level, round=round_index, client_id=client_id)

    def _refused(self, client_id: int, answered: Iterable[tuple[Instruction, Reply]]) -> bool:
        """Whether a reply to one of the client's steps holds a value outside its domain
        (reply_checks.py): then it is recorded as an ``anomaly`` and the client treated as
        not answering. A sample count that disagrees with the client's first in the run is
        an ``anomaly`` too, and refuses nothing; a lower count becomes the member's from
        then on (run_consistency.py: the lowest report is believed)."""
        for step, reply in answered:
            reason = refusal(reply, step)
            if reason is not None:
                self._event(step.round, "anomaly", client_id, reason)
                return True
            count = reply.metrics.num_samples
            if count is not None and (why := self.first_counts.disagreement(client_id, count)):
                self._event(step.round, "anomaly", client_id, why)
            lowered = None if count is None else self.first_counts.lower(client_id, count)
            if lowered is not None and client_id in self.members:
                self.members[client_id] = replace(self.members[client_id], num_samples=lowered)
        return False

    def _reachable(
        self, clients: Collection[int], online: set[int], round_index: int
    ) -> dict[int, int]:
        """The Flower node of each of ``clients`` that is a member and online now; an
        offline member is recorded as skipped, and its return as ``rejoined``."""
        nodes = {}
        for client_id in clients:
            member = self.members.get(client_id)
            if member is None:
                continue
            if member.flower_node_id not in online:
                self.offline.add(client_id)
                self._event(round_index, "offline", client_id, "node is offline; skipped")
                continue
            if client_id in self.offline:
                self.offline.discard(client_id)
                self._event(
                    round_index, "rejoined", client_id,
                    f"online again (Flower node {member.flower_node_id}) after being skipped",
                )  # fmt: skip
            nodes[client_id] = member.flower_node_id
        return nodes

    def refresh(self) -> set[int]:
        """Admit nodes that appeared since the last message (new or restarted clients).

        A restarted client daemon comes back as a new Flower node with the same client id;
        it takes over that member's place. Returns the node ids online now.
        """
        online = set(self.grid.get_node_ids())
        new = sorted(online - set(self.by_node) - set(self.door.refused(online)))
        joined = self.door.admit(new) if new else []
        if joined:
            self.ledger.register_members(joined)
        for member in joined:
            self._add(member)
        self._online = (time.monotonic(), online)
        return online

    def _add(self, member: Member) -> None:
        previous = self.members.get(member.client_id)
        if previous is not None:
            self.by_node.pop(previous.flower_node_id, None)
            log.info("client %s rejoined as node %s", member.client_id, member.flower_node_id)
        self.members[member.client_id] = member
        self.by_node[member.flower_node_id] = member.client_id

    def _peers(self, task: Collaborate, online: set[int]) -> tuple[int, ...]:
        """The step's candidates a client may fetch from now: members online and not
        silent (unknown, offline or silent peers are dropped)."""
        return tuple(
            j
            for j in task.candidates
            if j in self.members
            and self.members[j].flower_node_id in online
            and j not in self.silent
        )

    def _grants(
        self, programs: Mapping[int, Program], clients: Iterable[int], online: set[int]
    ) -> dict[int, Grants]:
        """Per round, the grants of every COLLABORATE step ``clients`` are sent: one ledger
        call for all of a round's fetches, not one per fetcher."""
        fetches: dict[int, dict[int, list[int]]] = {}
        for client_id in clients:
            for step in programs[client_id]:
                if isinstance(step.task, Collaborate) and (peers := self._peers(step.task, online)):
                    owners = fetches.setdefault(step.round, {}).setdefault(client_id, [])
                    owners += [j for j in peers if j not in owners]
        return {r: self.ledger.issue_grants(r, asked) for r, asked in fetches.items()}

    def _with_peer_access(
        self, client_id: int, step: Instruction, online: set[int], grants: Mapping[int, Grants]
    ) -> Instruction:
        """A COLLABORATE step with its owners' addresses and grants attached (``grants``:
        per round, from ``_grants``), and how long a fetch may wait for a peer: half the
        message deadline, so that the client still answers in time when a peer never
        publishes. Only its ``_peers`` stay in its list. Other steps as they are."""
        task = step.task
        if not isinstance(task, Collaborate):
            return step
        known = self._peers(task, online)
        weights = dict(zip(task.candidates, task.weights, strict=True))
        tokens = grants.get(step.round, {}).get(client_id, {})
        task = replace(
            task,
            candidates=known,
            weights=tuple(weights[j] for j in known),
            peer_addresses=tuple(self.members[j].peer_address for j in known),
            peer_grants=tuple(tokens[j] for j in known),
            peer_wait_s=self.timeout_s / 2,
        )
        return replace(step, task=task)


def _lost(content: str) -> str:
    """The ``no_reply`` event's words for a reply whose content never arrived."""
    return f"its reply was lost on the way: {content}"


def _message(program: Program, node: int) -> Message:
    """A lone step as its verb's message, several as one program message."""
    if len(program) == 1:
        step = program[0]
        content, kind = encode_instruction(step), message_type(step.verb)
    else:
        content, kind = encode_program(program), PROGRAM_MESSAGE
    return Message(content, dst_node_id=node, message_type=kind, group_id=str(program[0].round))


def _decode(content: RecordDict, steps: int) -> list[Reply]:
    return [decode_reply(content)] if steps == 1 else decode_replies(content, steps)
