"""BackgroundDigest: the BLAKE3 digest of what was queued, computed off the streaming thread."""

import os
import threading

import pytest
from blake3 import blake3

from collabfl.client import background_hash
from collabfl.client.background_hash import BackgroundDigest, weights_digest


@pytest.fixture
def no_inline(monkeypatch):
    """Every buffer goes to the worker, however small the stream."""
    monkeypatch.setattr(background_hash, "INLINE_BYTES", 0)


def hashing_threads() -> set[int | None]:
    return {t.ident for t in threading.enumerate() if t.name.startswith("digest")}


@pytest.mark.parametrize("depth", [1, 4])
@pytest.mark.parametrize("inline_bytes", [0, 3001, 1 << 20])
def test_digest_is_blake3_of_the_buffers_in_order(monkeypatch, depth, inline_bytes):
    monkeypatch.setattr(background_hash, "INLINE_BYTES", inline_bytes)
    buffers = [os.urandom(size) for size in (0, 1, 3000, 70_000, 5, 250_000)]
    with BackgroundDigest(depth) as sha:
        for buffer in buffers:
            sha.update(memoryview(buffer))
        digest = sha.hexdigest()
    assert digest == weights_digest(b"".join(buffers))


def test_a_long_stream_is_hashed_off_the_calling_thread(monkeypatch):
    threads: list[threading.Thread] = []
    real = blake3

    class Recording:
        def __init__(self, max_threads: int = 1) -> None:
            self._sha = real(max_threads=max_threads)

        def update(self, buffer: bytes) -> None:
            threads.append(threading.current_thread())
            self._sha.update(buffer)

        def hexdigest(self) -> str:
            return self._sha.hexdigest()

    monkeypatch.setattr(background_hash, "blake3", Recording)
    monkeypatch.setattr(background_hash, "INLINE_BYTES", 10)
    with BackgroundDigest() as sha:
        for _ in range(10):
            sha.update(b"chunk")
        assert sha.hexdigest() == real(b"chunk" * 10).hexdigest()
    caller = threading.current_thread()
    assert threads[:2] == [caller, caller]  # the first INLINE_BYTES
    assert len(threads) == 10
    assert caller not in threads[2:]


def test_close_drops_queued_buffers_and_stops_the_worker(no_inline):
    before = hashing_threads()
    sha = BackgroundDigest()
    for _ in range(4):
        sha.update(os.urandom(100_000))
    assert hashing_threads() - before  # the worker runs
    sha.close()
    assert hashing_threads() <= before


def test_a_small_stream_starts_no_worker():
    before = hashing_threads()
    with BackgroundDigest() as sha:
        sha.update(os.urandom(1000))
        assert hashing_threads() <= before
        assert sha.hexdigest()


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be >= 1"):
        BackgroundDigest(0)


def test_the_digest_is_blake3_by_its_published_test_vector():
    """Pins the algorithm: owners and fetchers of every version must agree on it."""
    empty = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert weights_digest(b"") == empty
    with BackgroundDigest() as digest:
        assert digest.hexdigest() == empty
