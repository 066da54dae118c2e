"""SHA-256 computed on a worker thread, so hashing overlaps the stream that feeds it.

hashlib releases the GIL while it digests a large buffer, so a model stream's hash can run
on a second core while the streaming thread receives, copies or sends the next chunk: the
fetcher hashes every byte it receives (and the owner every byte of a file it serves for the
first time), and in series a hash costs more than the transfer itself. Buffers are digested
in the order given; at most ``depth`` wait their turn, so a hash slower than the stream
holds back the stream instead of piling up chunks.
The first ``INLINE_BYTES`` are hashed on the caller's thread: starting a worker costs more
than it saves on a small model (a tiny fetch took twice as long with one).
"""

from __future__ import annotations

import hashlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

DEFAULT_DEPTH = 4
INLINE_BYTES = 1 << 20
"""How much of a stream is hashed on the caller's thread before the worker starts."""


class BackgroundSha256:
    """An ordered SHA-256 of buffers handed over one by one; a context manager.

    The caller must leave each buffer unchanged until ``hexdigest`` returns (bytes are
    immutable; a view of a tensor region must not be written again).
    """

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._depth = depth
        self._sha = hashlib.sha256()
        self._inline_left = INLINE_BYTES
        self._worker: ThreadPoolExecutor | None = None
        self._pending: deque[Future[Any]] = deque()

    def update(self, buffer: bytes | memoryview) -> None:
        """Queue ``buffer`` to be digested after everything queued before it."""
        size = memoryview(buffer).nbytes
        if self._worker is None and size <= self._inline_left:
            self._inline_left -= size
            self._sha.update(buffer)
            return
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256")
        while len(self._pending) >= self._depth:
            self._pending.popleft().result()
        self._pending.append(self._worker.submit(self._sha.update, buffer))

    def hexdigest(self) -> str:
        """The digest of every buffer queued so far (waits for the worker to catch up)."""
        while self._pending:
            self._pending.popleft().result()
        return self._sha.hexdigest()

    def close(self) -> None:
        """Stop the worker; buffers still queued are dropped (their digest is not needed)."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._worker is not None:
            self._worker.shutdown(wait=True)

    def __enter__(self) -> BackgroundSha256:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
