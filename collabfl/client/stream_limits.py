"""How much of a peer server one fetcher may hold: stream slots and deadlines.

A model stream occupies one server thread until its last chunk is sent, and gRPC only
sends as fast as the reader reads. A fetcher that opens streams and stops reading would
therefore pin every thread, and nobody else could fetch or even ask for its health. So
each fetcher identity gets a few concurrent streams, all fetchers together fewer streams
than the server has threads (the rest stay free for refusals and Health), and a stream
whose reader has not taken a chunk within the send deadline is cancelled. A stream that
waits for its round to be published holds its slot while it waits, for at most the
publish wait: parked calls are limited exactly like streams.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import grpc

log = logging.getLogger(__name__)

BUSY_KEY = "collabfl-busy"
"""Trailing metadata of a refusal for want of a free stream slot: the fetcher may ask again
(other RESOURCE_EXHAUSTED errors, such as an oversized message, are final)."""


@dataclass(frozen=True)
class StreamLimits:
    """The peer server's stream admission settings."""

    send_timeout_s: float = 30.0
    """A chunk not taken by the reader within this cuts the stream."""
    publish_wait_s: float = 300.0
    """How long a fetch of a round not published yet waits for it (and for no longer than
    the caller's deadline); 0: such a fetch fails at once. As long as the coordinator's
    default peer wait (half its 600 s message deadline): a slow honest peer's model still
    arrives, while a waiting call holds one of the fetcher's few stream slots."""
    streams_per_fetcher: int = 2
    max_streams: int = 6
    """All fetchers together; the server runs ``max_streams + SPARE_THREADS`` threads."""

    def __post_init__(self) -> None:
        if self.send_timeout_s <= 0:
            raise ValueError(f"send_timeout_s must be positive, got {self.send_timeout_s}")
        if self.publish_wait_s < 0:
            raise ValueError(f"publish_wait_s must be >= 0, got {self.publish_wait_s}")
        if not 1 <= self.streams_per_fetcher <= self.max_streams:
            raise ValueError(
                f"need 1 <= streams_per_fetcher ({self.streams_per_fetcher}) "
                f"<= max_streams ({self.max_streams})"
            )


SPARE_THREADS = 2
"""Server threads no stream can take: refusals and Health are answered while streams stall."""


class Stream:
    """One admitted stream; ``progress`` after each chunk the reader took.

    While it waits for a publish (``wait_until``) it is not a stalled reader.
    """

    def __init__(self, fetcher: int, context: grpc.ServicerContext, timeout_s: float) -> None:
        self.fetcher = fetcher
        self.context = context
        self._timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s

    def progress(self) -> None:
        self.deadline = time.monotonic() + self._timeout_s

    def wait_until(self, moment: float) -> None:
        """The stream waits (for its round) until ``moment`` at the latest; its reader then
        gets the usual send deadline."""
        self.deadline = moment + self._timeout_s


class StreamGuard:
    """Admits streams within the limits and cancels those whose reader stalls."""

    def __init__(self, limits: StreamLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._active: set[Stream] = set()
        self._stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="peer-stream-watch", daemon=True)
        self._watcher.start()

    def admit(self, fetcher: int, context: grpc.ServicerContext) -> Stream | None:
        """A slot for ``fetcher``'s stream, released when the call ends; None when full."""
        with self._lock:
            mine = sum(1 for stream in self._active if stream.fetcher == fetcher)
            if mine >= self.limits.streams_per_fetcher:
                return None
            if len(self._active) >= self.limits.max_streams:
                return None
            stream = Stream(fetcher, context, self.limits.send_timeout_s)
            self._active.add(stream)
        if not context.add_callback(lambda: self._release(stream)):
            self._release(stream)  # the call already ended
        return stream

    def stop(self) -> None:
        self._stopped.set()
        self._watcher.join()

    def _release(self, stream: Stream) -> None:
        with self._lock:
            self._active.discard(stream)

    def _watch(self) -> None:
        interval = min(self.limits.send_timeout_s / 4, 1.0)
        while not self._stopped.wait(interval):
            now = time.monotonic()
            with self._lock:
                stalled = [stream for stream in self._active if stream.deadline < now]
            for stream in stalled:
                log.warning(
                    "cutting client %s's model stream to %s: no chunk taken for %.1f s",
                    stream.fetcher,
                    stream.context.peer(),
                    self.limits.send_timeout_s,
                )
                self._release(stream)
                stream.context.cancel()
