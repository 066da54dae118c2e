"""benchmarks/reply_poll.py's hook into the SuperNodes of its federation, and nowhere else.

The benchmark puts this folder on PYTHONPATH, so every Python process of its federation
imports this module at start; it acts only in ``flower-supernode``. Flower's SuperNode
(``flwr/supernode/start_client_internal.py``, 1.41 and 1.42) serves one message at a time
and, once the message is handed to the executor, looks for its reply every 0.5 s
(``time.sleep(0.5)``; no option changes it). In the SuperNode this hook:

- prints ``REPLY-WAIT <round> <seconds>`` for every reply: how long it lay in the
  SuperNode's state (stored by the executor's push) before the loop found it;
- with ``COLLABFL_BENCH_SHORT_POLL=SECONDS:PARITY``, looks every SECONDS instead of 0.5 s
  in the rounds whose number % 2 is PARITY, so that one federation, under one load,
  measures both.

Flower is patched here for a measurement only; collabfl itself patches nothing in Flower.
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

    loop.time = ShortPoll()  # type: ignore[assignment]


if Path(sys.argv[0] if sys.argv else "").name == "flower-supernode":
    _install()
