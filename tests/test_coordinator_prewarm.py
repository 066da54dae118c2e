"""The coordinator daemon loads the run-request code once its SuperLink listens, not at start
and not at the first CreateRun (coordinator/prewarm.py)."""

from __future__ import annotations

import socket
import sys
import threading
import time

from collabfl.coordinator.prewarm import prewarm_when_listening

PROBE = "colorsys"
"""A small standard module nothing in the test session imports."""


def test_the_module_is_imported_only_once_the_port_listens() -> None:
    sys.modules.pop(PROBE, None)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        stopping = threading.Event()
        thread = prewarm_when_listening(port, stopping, PROBE)
        time.sleep(0.3)
        assert PROBE not in sys.modules  # bound, not listening: refused
        probe.listen()
        thread.join(timeout=5)
    assert PROBE in sys.modules


def test_stopping_ends_the_wait() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        stopping = threading.Event()
        thread = prewarm_when_listening(probe.getsockname()[1], stopping, PROBE)
        stopping.set()
        thread.join(timeout=2)
        assert not thread.is_alive()
