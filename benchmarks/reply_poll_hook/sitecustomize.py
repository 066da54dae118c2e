"""benchmarks/reply_poll.py's hook into the SuperNodes of its federation, and nowhere else.

The benchmark puts this folder on PYTHONPATH, so every Python process of its federation
imports this module at start; it acts only in a SuperNode (``flower-supernode``, or the
client daemon's collabfl/flower/quick_reply_supernode.py). Flower's SuperNode
(``flwr/supernode/start_client_internal.py``, 1.41 and 1.42) serves one message at a time
and, once the message is handed to the executor, looks for its reply every 0.5 s
(``time.sleep(0.5)``; no option changes it; the daemon's SuperNode looks every 0.02 s). In
the SuperNode this hook:

- prints ``REPLY-WAIT <round> <seconds>`` for every reply: how long it lay in the
  SuperNode's state (stored by the executor's push) before the loop found it;
- with ``COLLABFL_BENCH_SHORT_POLL=SECONDS:PARITY``, looks every SECONDS in the rounds
  whose number % 2 is PARITY and every 0.5 s, as Flower alone does, in the others (in
  place of the daemon's own poll), so that one federation, under one load, measures both.

tests/test_supernode_reply_poll.py fails when the internals used here change.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

SHORT_POLL = "COLLABFL_BENCH_SHORT_POLL"
FLOWER_POLL_S = 0.5


def _install() -> None:
    import flwr.supernode.start_client_internal as loop
    from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState

    stored: dict[str, float] = {}
    current = {"round": -1}
    store, look = InMemoryNodeState.store_message, InMemoryNodeState.get_messages_legacy

    def store_message(self: InMemoryNodeState, message: Any) -> Any:
        meta = message.metadata
        if meta.reply_to_message_id:
            stored[meta.message_id] = time.time()
        elif meta.group_id.isdigit():  # collabfl's messages carry their round
            current["round"] = int(meta.group_id)
        return store(self, message)

    def get_messages_legacy(self: InMemoryNodeState, **filters: Any) -> Any:
        found = look(self, **filters)
        for message in found if filters.get("is_reply") else ():
            at = stored.pop(message.metadata.message_id, None)
            if at is not None:
                waited = time.time() - at
                print(f"REPLY-WAIT {current['round']} {waited:.4f}", file=sys.stderr, flush=True)
        return found

    InMemoryNodeState.store_message = store_message  # type: ignore[method-assign]
    InMemoryNodeState.get_messages_legacy = get_messages_legacy  # type: ignore[method-assign]
    if not (setting := os.environ.get(SHORT_POLL)):
        return
    short_s, parity = float(setting.split(":")[0]), int(setting.split(":")[1])

    class ShortPoll:
        """``time`` as the SuperNode's loop sees it: in the chosen rounds its 0.5 s waits
        (the reply poll, and the wait for a pushed reply's content, there by then) are
        shortened; the 3 s after an empty pull is unchanged."""

        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def sleep(self, seconds: float) -> None:
            chosen = current["round"] >= 0 and current["round"] % 2 == parity
            time.sleep(short_s if seconds == FLOWER_POLL_S and chosen else seconds)

    create = InMemoryNodeState.__init__

    def create_then_poll(self: InMemoryNodeState, *args: Any, **kwargs: Any) -> None:
        """The SuperNode makes its state before its loop, after its entry point ran (the
        daemon's shortens the poll): this poll replaces whichever it set."""
        create(self, *args, **kwargs)
        loop.time = ShortPoll()  # type: ignore[assignment]

    InMemoryNodeState.__init__ = create_then_poll  # type: ignore[method-assign]


if Path(sys.argv[0] if sys.argv else "").name == "flower-supernode" or (
    "collabfl.flower.quick_reply_supernode" in sys.orig_argv
):
    _install()
