"""The BLAKE3 digest of a model's weights, computed on a worker thread beside the stream.

The fetcher hashes every byte it receives (and the owner every byte of a file it serves for
the first time). BLAKE3 rather than SHA-256 because the digest set the fetch's ceiling: on a
core without SHA extensions SHA-256 ran at 330-380 MB/s, below what one TCP stream carries
at 10 Gbit/s, while BLAKE3 ran at 3.4-4.3 GB/s on the same core (docs/performance.md). The
hash still runs on a worker thread (blake3 releases the GIL on large buffers) so that it
overlaps the receive, copy or send of the next chunk. Buffers are digested
in the order given; at most ``depth`` wait their turn, so a hash slower than the stream
holds back the stream instead of piling up chunks.
The first ``INLINE_BYTES`` are hashed on the caller's thread: starting a worker costs more
than it saves on a small model (a tiny fetch took twice as long with one).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from blake3 import blake3

DEFAULT_DEPTH = 4
INLINE_BYTES = 1 << 20
"""How much of a stream is hashed on the caller's thread before the worker starts."""


DIGEST_NAME = "BLAKE3"
"""How errors and documents name the weights' digest."""


def weights_digest(data: bytes | memoryview) -> str:
    """The lowercase hex BLAKE3 digest (32 bytes) of ``data``, hashed on this thread."""
    return blake3(data, max_threads=1).hexdigest()


class BackgroundDigest:
    """An ordered BLAKE3 digest of buffers handed over one by one; a context manager.

    The caller must leave each buffer unchanged until ``hexdigest`` returns (bytes are
    immutable; a view of a tensor region must not be written again).
    """

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._depth = depth
        self._hash = blake3(max_threads=1)
        self._inline_left = INLINE_BYTES
        self._worker: ThreadPoolExecutor | None = None
        self._pending: deque[Future[Any]] = deque()

    def update(self, buffer: bytes | memoryview) -> None:
        """Queue ``buffer`` to be digested after everything queued before it."""
        size = memoryview(buffer).nbytes
        if self._worker is None and size <= self._inline_left:
            self._inline_left -= size
            self._hash.update(buffer)
            return
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="digest")
        while len(self._pending) >= self._depth:
            self._pending.popleft().result()
        self._pending.append(self._worker.submit(self._hash.update, buffer))

    def hexdigest(self) -> str:
        """The digest of every buffer queued so far (waits for the worker to catch up)."""
        while self._pending:
            self._pending.popleft().result()
        return self._hash.hexdigest()

    def close(self) -> None:
        """Stop the worker; buffers still queued are dropped (their digest is not needed)."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._worker is not None:
            self._worker.shutdown(wait=True)

    def __enter__(self) -> BackgroundDigest:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
