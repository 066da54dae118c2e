"""A count of events that threads and asyncio tasks can wait on: the Flower transport's
signals inside the coordinator daemon.

The Fleet gateway (an asyncio server) and the coordinator service (gRPC threads) run in one
process. Two things happen on one side that the other waits for: the ServerApp pushed
messages (the service hears it; the gateway's held SuperNode pulls should ask the SuperLink
again now) and a SuperNode pushed a reply (the gateway sees it; the ServerApp, waiting in
the service, should pull now). Each is a ``Doorbell``: a waiter names the count it has seen
and returns as soon as the count is higher, so a ring between two waits is never missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field


class Doorbell:
    """Counts rings; ``wait`` (threads) and ``wait_async`` (asyncio) return the count once
    it exceeds the one the caller saw, or when their timeout passes."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()
        self._tasks: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    @property
    def count(self) -> int:
        with self._changed:
            return self._count

    def ring(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()
            tasks = list(self._tasks)
        for loop, event in tasks:
            with contextlib.suppress(RuntimeError):  # its loop has closed meanwhile
                loop.call_soon_threadsafe(event.set)

    def wait(self, seen: int, timeout_s: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self._count > seen, timeout=timeout_s)
            return self._count

    async def wait_async(self, seen: int, timeout_s: float) -> int:
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._changed:
            if self._count > seen:
                return self._count
            self._tasks.add(entry)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(entry[1].wait(), timeout_s)
        finally:
            with self._changed:
                self._tasks.discard(entry)
        return self.count


@dataclass(frozen=True)
class FleetActivity:
    """What the service and the gateway signal to each other (see the module doc)."""

    messages: Doorbell = field(default_factory=Doorbell)
    """Rung when the ServerApp pushed messages; held SuperNode pulls wait on it."""
    replies: Doorbell = field(default_factory=Doorbell)
    """Rung when a SuperNode pushed a reply; the ServerApp's AwaitReplies waits on it."""
    runs: Doorbell = field(default_factory=Doorbell)
    """Rung when the service created a run; the daemon's run launcher launches it at once."""
