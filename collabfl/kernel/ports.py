"""Ports picked here and listened on by another process, kept from everyone else meanwhile.

Asking the kernel for a free port and closing the probe leaves the port free for anyone:
an outgoing connection's ephemeral port or another program's ``bind(("", 0))`` can take it
in the seconds before the daemon it was meant for binds it, and that daemon then fails
with "address in use". A :class:`PortReservation` keeps a socket bound to each port, with
``SO_REUSEADDR`` and never listening, until it is released:

- the kernel hands none of these ports out automatically (``bind`` to port 0 and
  ``connect`` skip a port that has a bound socket), nor to a plain ``bind`` of it;
- the daemon still binds it, because the servers it runs (gRPC, uvicorn and asyncio,
  Flower's SuperLink and SuperNode) set ``SO_REUSEADDR`` and Linux lets such a socket
  listen beside one that is bound and not listening;
- a connection to a reserved port nobody listens on is refused, as on a closed port.

Sockets are not inherited by child processes (Python opens them close-on-exec), so the
reservation ends with the process that holds it.

This is Linux's rule. The BSDs and macOS let a second socket bind the same address and port
only when both set ``SO_REUSEPORT``, which uvicorn does not; there the ports are probed and
let go at once, as before, and the race stays.
"""

from __future__ import annotations

import socket
import sys
from types import TracebackType

LOOPBACK = "127.0.0.1"
HOLDS = sys.platform.startswith("linux")
"""Whether a reservation keeps its ports (Linux) or only picks them (elsewhere)."""


class PortReservation:
    """``count`` ports on ``host`` that no one else gets until :meth:`release`."""

    def __init__(self, count: int, host: str = LOOPBACK) -> None:
        self._sockets: list[socket.socket] = []
        try:
            for _ in range(count):
                held = socket.socket()
                self._sockets.append(held)
                held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                held.bind((host, 0))
        except OSError:
            self.release()
            raise
        self.ports: list[int] = [int(held.getsockname()[1]) for held in self._sockets]
        if not HOLDS:
            self.release()

    def release(self) -> None:
        """Let the ports go; their listeners, if any, keep them."""
        for held in self._sockets:
            held.close()
        self._sockets.clear()

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
