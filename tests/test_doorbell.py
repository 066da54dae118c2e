"""The coordinator daemon's doorbells: a ring reaches a waiting thread and a waiting asyncio
task, a ring before the wait is not missed, and an unrung wait ends at its timeout.

A waiter that a ring fails to wake would sit out its whole (long) timeout, so each test
gives the waiter a timeout far longer than the test may take and checks it returned early.
"""

from __future__ import annotations

import asyncio
import threading

from collabfl.coordinator.gateway.doorbell import Doorbell

LONG_S = 120.0


def test_a_ring_wakes_a_waiting_thread():
    bell = Doorbell()
    woke: list[int] = []
    waiter = threading.Thread(target=lambda: woke.append(bell.wait(0, LONG_S)))
    waiter.start()
    bell.ring()
    waiter.join(timeout=LONG_S / 4)
    assert not waiter.is_alive() and woke == [1]


def test_a_ring_wakes_a_waiting_task_on_another_threads_loop():
    bell = Doorbell()
    woke: list[int] = []
    waiting = threading.Event()

    async def wait() -> None:
        task = asyncio.ensure_future(bell.wait_async(0, LONG_S))
        while not bell._tasks:  # registered: the ring below must wake it, not precede it
            await asyncio.sleep(0)
        waiting.set()
        woke.append(await task)

    loop_thread = threading.Thread(target=lambda: asyncio.run(wait()))
    loop_thread.start()
    assert waiting.wait(LONG_S / 4)
    bell.ring()  # from this thread, as the coordinator service rings
    loop_thread.join(timeout=LONG_S / 4)
    assert not loop_thread.is_alive() and woke == [1]
    assert not bell._tasks  # the woken waiter is gone from the bell


def test_a_ring_before_the_wait_is_not_missed():
    bell = Doorbell()
    bell.ring()
    assert bell.wait(0, LONG_S) == 1
    assert asyncio.run(bell.wait_async(0, LONG_S)) == 1


def test_an_unrung_wait_ends_at_its_timeout_with_the_count_unchanged():
    bell = Doorbell()
    bell.ring()
    assert bell.wait(1, 0.01) == 1
    assert asyncio.run(bell.wait_async(1, 0.01)) == 1
    assert not bell._tasks
