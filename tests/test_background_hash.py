"""BackgroundSha256: the digest of what was queued, computed off the streaming thread."""

import hashlib
import os
import threading

import pytest

from collabfl.client import background_hash
from collabfl.client.background_hash import BackgroundSha256


@pytest.mark.parametrize("depth", [1, 4])
def test_digest_is_sha256_of_the_buffers_in_order(depth):
    buffers = [os.urandom(size) for size in (0, 1, 3000, 70_000, 5, 250_000)]
    with BackgroundSha256(depth) as sha:
        for buffer in buffers:
            sha.update(memoryview(buffer))
        digest = sha.hexdigest()
    assert digest == hashlib.sha256(b"".join(buffers)).hexdigest()


def test_hashing_runs_off_the_calling_thread(monkeypatch):
    threads: list[threading.Thread] = []
    real = hashlib.sha256

    class Recording:
        def __init__(self) -> None:
            self._sha = real()

        def update(self, buffer: bytes) -> None:
            threads.append(threading.current_thread())
            self._sha.update(buffer)

        def hexdigest(self) -> str:
            return self._sha.hexdigest()

    monkeypatch.setattr(background_hash.hashlib, "sha256", Recording)
    with BackgroundSha256() as sha:
        for _ in range(10):
            sha.update(b"chunk")
        assert sha.hexdigest() == real(b"chunk" * 10).hexdigest()
    assert len(threads) == 10
    assert threading.current_thread() not in threads


def test_close_drops_queued_buffers_and_stops_the_worker():
    before = {t.ident for t in threading.enumerate()}
    sha = BackgroundSha256()
    for _ in range(4):
        sha.update(os.urandom(100_000))
    sha.close()
    assert {t.ident for t in threading.enumerate() if t.name.startswith("sha256")} <= before


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be >= 1"):
        BackgroundSha256(0)
