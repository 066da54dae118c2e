"""A ration of events for calls that anyone may make, so that a flood writes a bounded number.

A failed join is open to anyone who reaches the public port: each used to write an event
and a log line, and the per-address throttle bounds only what one address writes, so a flood
from many addresses wrote without end. The ration admits ``per_interval`` events in any
``interval_s``; the rest are counted, and the count goes into the next admitted one.
"""

from __future__ import annotations

import threading
from collections import deque


class EventRation:
    """Whether an event may be written now (``admit``; any thread)."""

    def __init__(self, per_interval: int = 10, interval_s: float = 60.0) -> None:
        self.per_interval = per_interval
        self.interval_s = interval_s
        self._written: deque[float] = deque()
        self._unwritten = 0
        self._lock = threading.Lock()

    def admit(self, now: float) -> int | None:
        """None: write nothing (counted); otherwise write, mentioning the returned number of
        events left unwritten since the last one written."""
        with self._lock:
            while self._written and self._written[0] <= now - self.interval_s:
                self._written.popleft()
            if len(self._written) >= self.per_interval:
                self._unwritten += 1
                return None
            self._written.append(now)
            unwritten, self._unwritten = self._unwritten, 0
            return unwritten
