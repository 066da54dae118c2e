"""Messages to Flower nodes and their replies: pushed at once, collected until a deadline.

Flower's own ``Grid.send_and_receive`` sleeps 3 s between polls for replies. Here a push
is signalled, so that SuperNodes get their messages at once, and replies are pulled when a
signal says one arrived (apps/fleet_signals.py), their content without Flower's 1 s
back-off (flower/reply_pull.py). Pushing and collecting are separate steps for messages
whose replies come much later (a sub-step relay seat, apps/substeps.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from collabfl.apps.fleet_signals import FleetSignals
from collabfl.flower.reply_pull import pull_replies


@dataclass(frozen=True)
class Answer:
    """One node's reply to a message, and when it travelled (Unix seconds)."""

    content: RecordDict | str
    """The reply's content, or the error text of a reply that carries an error."""
    sent_at: float
    """When the coordinator created the message."""
    replied_at: float
    """When the client created its reply (its clock)."""
    seen_at: float
    """When the coordinator pulled the reply."""


def push(
    grid: Grid, messages: list[Message], signals: FleetSignals
) -> tuple[dict[str, float], int]:
    """Push ``messages``; return each one's id and when it was created (Unix seconds), and
    the count of replies signalled before (``collect``'s ``seen``)."""
    grid.push_messages(messages)
    seen = signals.pushed()
    # Pushing gives each message its id (before, every id is empty).
    return {m.metadata.message_id: m.metadata.created_at for m in messages}, seen


def collect(
    grid: Grid,
    sent: dict[str, float],
    timeout_s: float,
    signals: FleetSignals,
    destinations: Mapping[str, int] | None = None,
    seen: int = 0,
) -> dict[int, Answer]:
    """Pull the replies to the ``sent`` messages as they arrive, until all have or the
    deadline passed (``timeout_s`` 0: look once). ``seen``: the reply signals counted
    before the push; from 0, the first wait returns at once and the SuperLink is asked
    once more for nothing.

    Returns the answer per source node id; with ``destinations`` (message id -> the node it
    went to), per destination, so that the error the SuperLink answers for a node that went
    offline (its source is the SuperLink) is that node's answer.
    """
    pending = set(sent)
    deadline = time.monotonic() + timeout_s
    answers: dict[int, Answer] = {}
    while pending:
        for reply in pull_replies(grid, list(pending)):
            pending.discard(reply.reply_to)
            sent_at = sent.get(reply.reply_to, reply.created_at)
            answer = Answer(reply.content, sent_at, reply.created_at, time.time())
            node = (destinations or {}).get(reply.reply_to, reply.src_node_id)
            answers[node] = answer
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        seen = signals.await_replies(seen, left)
    return answers


def exchange(
    grid: Grid, messages: list[Message], timeout_s: float, signals: FleetSignals
) -> dict[int, Answer]:
    """Push messages and collect their replies, per node, until all arrive or the deadline
    passes."""
    sent, seen = push(grid, messages, signals)
    destinations = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
    return collect(grid, sent, timeout_s, signals, destinations, seen)
