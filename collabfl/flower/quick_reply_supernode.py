"""``flower-supernode``, finding its executor's reply within 20 ms instead of 0.5 s.

Flower 1.41 and 1.42's SuperNode serves one message at a time: it hands the message to its
executor, looks for the reply every 0.5 s (``time.sleep(0.5)`` in the loop of
``flwr/supernode/start_client_internal.py``; no option or variable sets it), and pulls its
next message only after it has pushed that reply. So every message of every round waited up
to 0.5 s for a reply that was already there: a 4-client DPFL round on a quiet 2-core machine
took 0.73 s with that poll and 0.52 s without it (docs/performance.md, "Under Flower's reply
poll").

A client daemon therefore starts its SuperNode through this module: Flower's own entry
point, in a process where the loop's module sees a ``time`` whose ``sleep(0.5)`` waits
``REPLY_POLL_S``. That poll asks the SuperNode's in-memory state for a reply, a lookup
among the few messages it holds, so 50 a second while the executor works cost next to
nothing. Every other wait of Flower's (3 s after a pull that found no message) is its own.
tests/test_supernode_reply_poll.py fails if the loop's poll changes on a Flower upgrade.
"""

from __future__ import annotations

import sys
import time
from types import ModuleType
from typing import Any

from collabfl.flower.processes import flower_entry_point
from collabfl.kernel.python_command import module_command

FLOWER_ENTRY_POINT = "flower-supernode"
FLOWER_REPLY_POLL_S = 0.5
"""The literal the loop sleeps between looks for its reply (Flower 1.41, 1.42)."""
REPLY_POLL_S = 0.02
"""How often this SuperNode looks for its reply instead."""


def supernode_program() -> list[str]:
    """The command that starts this module's SuperNode; Flower's flags follow it."""
    return module_command(__name__)


class ReplyPollClock:
    """The ``time`` module as the SuperNode loop sees it, its reply poll's sleep shortened
    to ``poll_s``; every other attribute and sleep is ``time``'s own."""

    def __init__(self, poll_s: float = REPLY_POLL_S) -> None:
        self.poll_s = poll_s

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        time.sleep(self.poll_s if seconds == FLOWER_REPLY_POLL_S else seconds)


def shorten_reply_poll(loop: ModuleType, poll_s: float = REPLY_POLL_S) -> None:
    """Make the SuperNode loop's module ``loop`` look for replies every ``poll_s``."""
    loop.time = ReplyPollClock(poll_s)  # type: ignore[attr-defined]


def main() -> None:
    """Run ``flower-supernode`` with this process's arguments and the short reply poll."""
    from flwr.supernode import start_client_internal

    shorten_reply_poll(start_client_internal)
    sys.argv[0] = FLOWER_ENTRY_POINT
    sys.exit(flower_entry_point(FLOWER_ENTRY_POINT)())


if __name__ == "__main__":
    main()
