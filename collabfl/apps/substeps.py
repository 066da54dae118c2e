"""Sub-round steps over the coordinator's relay instead of one Flower message each.

FedCollab's distance estimation and SPO's search ask every client for up to hundreds of
small steps within a round (DISCRIMINATE, GRADIENT), and a Flower message costs seconds. So
the ServerApp opens a relay session (coordinator/relay/substep_relay.py) and sends each client one
Flower message, a *seat*: the session, a random token and where the relay listens. The
client's ClientApp then polls its seat for steps and runs them on its node until the session
closes, and the ServerApp relays each step over a connection that is already open. The
steps, their replies and the strategy code are the same as on the message path; only the
transport differs.

``RelayedSteps`` is the ServerApp's side, ``serve_seat`` the client's.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from collabfl.apps.exchange import Answer, collect, push
from collabfl.apps.fleet_signals import POLLING, FleetSignals
from collabfl.apps.timing import MessageTiming, seat_timing
from collabfl.coordinator.relay.substep_client import SeatPoller, SessionFeeder
from collabfl.coordinator.relay.substep_relay import MAX_SEATS, StepResult
from collabfl.flower.codec import (
    MESSAGE_PREFIX,
    content_bytes,
    content_from_bytes,
    decode_instruction,
    decode_reply,
    encode_instruction,
    encode_reply,
)
from collabfl.flower.reply_pull import content_lost, node_gone
from collabfl.strategies.metrics import WORK_SECONDS
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Discriminate, Gradient
from collabfl.strategies.wire import decode, encode

log = logging.getLogger(__name__)

SEAT_MESSAGE = MESSAGE_PREFIX + "substeps"
SUBSTEP_TASKS = (Discriminate, Gradient)
"""The verbs a method sends many times within a round: these go through the relay."""
HEARTBEAT_S = 1.0
"""How often the ServerApp looks whether a seat message came back while it waits on steps."""
CLOSE_GRACE_S = 10.0
"""How long closing a session waits for the seat messages to come back: a live seat returns
at once, a hung client's never does and must not hold up the round."""
POLL_WAIT_S = 20.0
"""How long one poll waits for a step (a closed session answers at once)."""
_SEAT, _SERVED = "seat", "served"


@dataclass(frozen=True)
class Seat:
    """What a client needs to take its seat in a relay session."""

    session: str
    token: bytes
    address: str
    """Where the relay listens, as the ServerApp reaches it (a client may override it)."""
    round: int
    idle_s: float
    """A session its ServerApp has not fed this long is given up (the ServerApp is gone)."""


def encode_seat(seat: Seat) -> RecordDict:
    return RecordDict({_SEAT: ConfigRecord(encode(seat))})


def decode_seat(content: RecordDict) -> Seat:
    """The seat a message offers; ValueError if it is malformed."""
    return _decode_record(Seat, content, _SEAT)


@dataclass(frozen=True)
class Served:
    """A seat's reply once its session closed: the steps it served and their seconds."""

    steps: int
    work_s: float


def encode_served(served: Served) -> RecordDict:
    return RecordDict({_SERVED: ConfigRecord(encode(served))})


def decode_served(content: RecordDict) -> Served:
    """What a seat's reply says it served; ValueError if it is malformed."""
    return _decode_record(Served, content, _SERVED)


_Record = TypeVar("_Record", Seat, Served)


def _decode_record(kind: type[_Record], content: RecordDict, key: str) -> _Record:
    record = content.config_records.get(key)
    if record is None:
        raise ValueError(f"the message carries no {key!r} record")
    return decode(kind, record)


@dataclass(frozen=True)
class SessionEnd:
    """What closing a session found: the seats that came back with an error, and the
    timing of each seat that came back cleanly (messages.jsonl)."""

    failed: dict[int, str]
    timings: list[MessageTiming]


def is_substep(instructions: Mapping[int, Instruction]) -> bool:
    """Whether these instructions are a method's sub-round steps (the relay's to carry)."""
    return bool(instructions) and all(
        isinstance(i.task, SUBSTEP_TASKS) for i in instructions.values()
    )


Outcome = Reply | str
"""A client's reply, or why it has none (its error, or an unreadable answer)."""


class RelayedSteps:
    """The ServerApp's side: seats clients in a session and relays their steps.

    A session lasts while the method sends sub-round steps to clients it seats; a step for a
    client without a seat, or any other message, ends it (``close``) first.
    """

    def __init__(
        self,
        grid: Grid,
        feeder: SessionFeeder,
        timeout_s: float,
        signals: FleetSignals = POLLING,
    ) -> None:
        self.grid = grid
        self.feeder = feeder
        self.timeout_s = timeout_s
        self.signals = signals
        self._session: str | None = None
        self.round = -1
        """The round of the session open now, or of the last one."""
        self._seated: dict[int, int] = {}
        """Client -> Flower node of the session's seats."""
        self._sent: dict[str, float] = {}
        """Seat message id -> when it was sent."""
        self._seat_of: dict[str, int] = {}
        """Seat message id -> its client."""
        self._returned: dict[int, Answer] = {}
        """Clients whose seat message came back, and its answer."""
        self._opened = 0
        self._steps = 0
        self._opened_at = 0.0

    def send(
        self, instructions: Mapping[int, Instruction], nodes: Mapping[int, int]
    ) -> dict[int, Outcome]:
        """Each client's outcome for its step (``nodes``: client -> Flower node); clients
        that do not answer within the deadline are absent. A client whose seat message
        comes back (its ClientApp failed or gave up, or its node went offline: the
        SuperLink's error, passed on as it is) is waited for no longer."""
        round_index = next(iter(instructions.values())).round
        wanted = {k: nodes[k] for k in instructions}
        seated = all(self._seated.get(k) == node for k, node in wanted.items())
        if self._session is None or round_index != self.round or not seated:
            self.close()
            self._open(round_index, wanted)
        assert self._session is not None
        session, deadline = self._session, time.monotonic() + self.timeout_s
        self._steps += 1
        work = {k: content_bytes(encode_instruction(i)) for k, i in sorted(instructions.items())}
        relayed = self.feeder.relay(session, work, {}, min(HEARTBEAT_S, self.timeout_s))
        steps, results = relayed.steps, dict(relayed.results)
        # Wait in short calls, so that a seat that came back is noticed within HEARTBEAT_S.
        while awaiting := {
            k: step for k, step in steps.items() if k not in results and k not in self._returned
        }:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._watch_seats()
            results |= self.feeder.relay(session, {}, awaiting, min(HEARTBEAT_S, left)).results
        outcomes: dict[int, Outcome] = {k: _outcome(result) for k, result in results.items()}
        for client in steps.keys() - results.keys():
            if client in self._returned:
                served = _served(self._returned[client])
                reason = served if isinstance(served, str) else "its ClientApp left the session"
                # The node's loss (offline, or its reply lost on the way) is passed on as it is.
                lost = node_gone(reason) or content_lost(reason)
                outcomes[client] = reason if lost else f"relay seat: {reason}"
        return outcomes

    def close(self) -> SessionEnd:
        """End the session and wait up to CLOSE_GRACE_S for its seat messages to come back
        (a seat that has not by then is left behind)."""
        if self._session is None:
            return SessionEnd({}, [])
        session = self._session
        self._session = None
        self.feeder.close_session(session)
        log.info(
            "relay session %s: %d steps to %d clients in %.1f s",
            session,
            self._steps,
            len(self._seated),
            time.monotonic() - self._opened_at,
        )
        self._watch_seats(min(self.timeout_s, CLOSE_GRACE_S))
        failed, timings = {}, []
        for client, answer in sorted(self._returned.items()):
            served = _served(answer)
            if isinstance(served, str) and (node_gone(served) or content_lost(served)):
                continue  # the node's loss, not the client's failure (its step says so)
            if isinstance(served, str):
                failed[client] = served
            else:
                timings.append(seat_timing(self.round, client, answer, served.steps, served.work_s))
        self._sent, self._seat_of, self._seated, self._returned = {}, {}, {}, {}
        return SessionEnd(failed, timings)

    def _watch_seats(self, timeout_s: float = 0.0) -> None:
        """Note the seats whose message came back, waiting up to ``timeout_s`` for all."""
        by_node = {node: client for client, node in self._seated.items()}
        pending = {
            message: sent
            for message, sent in self._sent.items()
            if self._seat_of[message] not in self._returned
        }
        # Per destination: the SuperLink answers for a node that went offline as itself.
        seat_nodes = {message: self._seated[self._seat_of[message]] for message in pending}
        answers = collect(self.grid, pending, timeout_s, self.signals, seat_nodes)
        for node, answer in answers.items():
            if node in by_node:
                self._returned[by_node[node]] = answer

    def _open(self, round_index: int, nodes: Mapping[int, int]) -> None:
        if len(nodes) > MAX_SEATS:
            raise ValueError(f"a relay session seats at most {MAX_SEATS} clients")
        self._opened += 1
        self._steps, self._opened_at = 0, time.monotonic()
        session = f"round-{round_index}-{self._opened}"
        tokens = {client: secrets.token_bytes(32) for client in nodes}
        self.feeder.open(session, tokens)
        messages = [
            Message(
                encode_seat(
                    Seat(session, tokens[client], self.feeder.address, round_index, self.timeout_s)
                ),
                dst_node_id=node,
                message_type=SEAT_MESSAGE,
                group_id=str(round_index),
            )
            for client, node in nodes.items()
        ]
        self._sent, _ = push(self.grid, messages, self.signals)
        node_of = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        client_of = {node: client for client, node in nodes.items()}
        self._seat_of = {message: client_of[node] for message, node in node_of.items()}
        self._session, self.round, self._seated = session, round_index, dict(nodes)


def _served(answer: Answer) -> Served | str:
    """What a seat that came back served, or why it came back unsuccessfully."""
    if isinstance(answer.content, str):
        return answer.content
    try:
        return decode_served(answer.content)
    except ValueError as error:
        return f"unreadable seat reply: {error}"


def _outcome(result: StepResult) -> Outcome:
    if result.error:
        return result.error
    try:
        return decode_reply(content_from_bytes(result.payload))
    except ValueError as error:
        return f"unreadable reply: {error}"


def serve_seat(
    poller: SeatPoller, run_step: Callable[[Instruction], Reply], idle_s: float
) -> Served:
    """Run the steps the relay hands this seat until the session closes; return what it
    served.

    A step that is not a sub-round verb, or that fails, is answered with its error (the
    ServerApp treats the client as not having answered it). A session its ServerApp has not
    fed for ``idle_s`` is given up (the ServerApp is gone, and the node must be free for the
    next run); a ServerApp still waiting on another, slower client keeps feeding it.
    """
    answered, result, served, work_s = 0, None, 0, 0.0
    while True:
        work = poller.poll(answered, result, min(POLL_WAIT_S, idle_s))
        result = None  # delivered with that poll
        if work.closed:
            return Served(served, work_s)
        if work.step == 0:
            if work.fed_ago_s > idle_s:
                raise TimeoutError(f"the session was not fed for {idle_s:g} s: given up")
            continue
        try:
            instruction = decode_instruction(content_from_bytes(work.payload))
            if not isinstance(instruction.task, SUBSTEP_TASKS):
                raise ValueError(f"{instruction.verb.value} is not a sub-round step")
            reply = run_step(instruction)
            work_s += sum(getattr(reply.metrics, name) or 0.0 for name in WORK_SECONDS)
            result = StepResult(content_bytes(encode_reply(reply)))
        except Exception as error:  # the ServerApp hears why; the seat stays usable
            log.warning("sub-step %s failed: %s", work.step, error)
            result = StepResult(error=f"{type(error).__name__}: {error}")
        answered, served = work.step, served + 1
