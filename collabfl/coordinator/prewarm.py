"""Load the run-request code (it imports torch) once the SuperLink listens, before the first
run asks for it.

The daemon does not import torch at start: on a machine shared with its clients, the
CPU-second it costs would delay the SuperNodes' joining. The first ``CreateRun`` imported
it instead, with the caller waiting. In a 4-client launch on 2 cores that took 6.1 s, the
largest step between all clients online and the first round. Once the SuperLink listens, the
SuperNodes have done their own imports, so the daemon loads the code in the background then.
"""

from __future__ import annotations

import importlib
import logging
import socket
import threading
import time

log = logging.getLogger(__name__)

RUN_REQUEST_MODULE = "collabfl.engine.methods"
"""What ``CreateRun`` and the run launcher import first (``read_run_request``)."""
CHECK_S = 0.1
"""How often the SuperLink's port is tried (a refused loopback connect: free)."""


def prewarm_when_listening(
    port: int,
    stopping: threading.Event,
    module: str = RUN_REQUEST_MODULE,
    host: str = "127.0.0.1",
) -> threading.Thread:
    """A started daemon thread that imports ``module`` once ``host:port`` accepts a
    connection (or gives up when ``stopping`` is set)."""

    def run() -> None:
        while not stopping.is_set():
            try:
                socket.create_connection((host, port), timeout=1.0).close()
            except OSError:
                stopping.wait(CHECK_S)
                continue
            started = time.perf_counter()
            importlib.import_module(module)
            log.info("loaded %s in %.1f s", module, time.perf_counter() - started)
            return

    thread = threading.Thread(target=run, name="prewarm", daemon=True)
    thread.start()
    return thread
