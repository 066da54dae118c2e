"""Stopping a run from the terminal or with ``kill``: the whole process tree, quietly.

Ctrl-C (SIGINT) and ``kill`` (SIGTERM) both become a KeyboardInterrupt in the main process,
so the round driver marks the run "interrupted" wherever it was. ``compare``'s worker
processes ignore the terminal's SIGINT (the parent decides), die with their parent, and
treat the SIGTERM the parent sends them as an interrupt of the method they run: its summary
is written, then the worker exits without a traceback.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_PR_SET_PDEATHSIG = 1
_in_task = False
"""In a worker: whether it is running a method now (else a SIGTERM just ends it)."""


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM interrupts the main thread as Ctrl-C does."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def init_worker() -> None:
    """Worker process set-up (a ``multiprocessing.Pool`` initializer)."""
    if sys.platform.startswith("linux"):  # the kernel signals us when the parent dies
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_sigterm)


def _worker_sigterm(signum: int, frame: FrameType | None) -> None:
    if _in_task:
        raise KeyboardInterrupt("stopped by the parent")
    os._exit(128 + signum)


@contextmanager
def worker_task() -> Iterator[None]:
    """Run one method in a worker; an interrupt ends the worker once the method has written
    what it could (its summary marked interrupted), with no traceback for the console."""
    global _in_task
    _in_task = True
    try:
        yield
    except KeyboardInterrupt:
        os._exit(128 + signal.SIGTERM)
    finally:
        _in_task = False
