"""Where each message's round trip went: the records of a run's messages.jsonl.

Client and coordinator clocks are compared, so on separate machines the split is only as
good as their synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from collabfl.apps.exchange import Answer
from collabfl.strategies.metrics import WORK_SECONDS
from collabfl.strategies.protocol import Reply


@dataclass(frozen=True)
class MessageTiming:
    """One answered Flower message: the client's work (its verbs' seconds), getting the
    message to the client and the work started (``to_client_s``: delivery, the ClientApp's
    start, state loading and saving) and getting the reply back (``to_coordinator_s``).

    A relay seat (``kind`` "seat", apps/substeps.py) is one message that lasts a whole
    session: ``steps`` counts the sub-round steps it served and ``work_s`` their seconds, so
    its ``to_client_s`` also holds the relay's share of the session (each step's trip
    through the coordinator service and the waits for slower clients).
    """

    round: int
    client: int
    steps: int
    round_trip_s: float
    work_s: float
    to_client_s: float
    to_coordinator_s: float
    kind: Literal["message", "seat"] = "message"


def message_timing(
    round_index: int, client: int, answer: Answer, replies: list[Reply]
) -> MessageTiming:
    work = sum(getattr(r.metrics, name) or 0.0 for r in replies for name in WORK_SECONDS)
    return _timing(round_index, client, answer, len(replies), work, "message")


def seat_timing(
    round_index: int, client: int, answer: Answer, steps: int, work_s: float
) -> MessageTiming:
    return _timing(round_index, client, answer, steps, work_s, "seat")


def _timing(
    round_index: int,
    client: int,
    answer: Answer,
    steps: int,
    work_s: float,
    kind: Literal["message", "seat"],
) -> MessageTiming:
    return MessageTiming(
        round=round_index,
        client=client,
        steps=steps,
        round_trip_s=answer.seen_at - answer.sent_at,
        work_s=work_s,
        to_client_s=answer.replied_at - answer.sent_at - work_s,
        to_coordinator_s=answer.seen_at - answer.replied_at,
        kind=kind,
    )
