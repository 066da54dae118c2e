"""Keep this daemon's deny list (kernel/revocation.py) and ended runs in step with the
coordinator's.

The coordinator publishes the serials of revoked certificates and the runs that have ended
on its public port (``GET /collabfl/v1/revoked``, over TLS verified against the federation
CA). A client daemon asks for them at start and every ``every_s`` after, so that within that
time its peer server refuses a revoked member and its ClientApp (another process, which
reads the ``ended_runs`` file) an ended run's ticket; a failed ask keeps what it has.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import threading
from pathlib import Path

from collabfl.kernel.netprobe import split_address
from collabfl.kernel.revocation import DENIED
from collabfl.kernel.tickets import RunEnd, run_ends_from_json, save_run_ends

log = logging.getLogger(__name__)

REVOKED_PATH = "/collabfl/v1/revoked"
EVERY_S = 15.0


class RevocationPoller:
    """Refreshes ``DENIED``, and the file ``ended_runs`` when given, from the coordinator at
    ``address`` until stopped."""

    def __init__(
        self, address: str, ca: Path, every_s: float = EVERY_S, ended_runs: Path | None = None
    ) -> None:
        self.host, self.port = split_address(address)
        self.context = ssl.create_default_context(cafile=str(ca))
        self.every_s = every_s
        self.ended_runs = ended_runs
        self._saved_ends: dict[str, RunEnd] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="revocations", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def refresh(self) -> None:
        """One ask; OSError or ValueError when it fails."""
        connection = http.client.HTTPSConnection(
            self.host, self.port, timeout=10.0, context=self.context
        )
        try:
            connection.request("GET", REVOKED_PATH)
            response = connection.getresponse()
            body = response.read(1 << 20)
        finally:
            connection.close()
        if response.status != 200:
            raise ValueError(f"{REVOKED_PATH} answered {response.status}")
        published = json.loads(body)
        serials = published["serials"]
        if not isinstance(serials, list) or not all(isinstance(s, str) for s in serials):
            raise ValueError("the revoked list is not a list of serials")
        ends = run_ends_from_json(published.get("ended_runs", {}))
        if len(serials) != len(DENIED):
            log.info("revoked certificates: %s", len(serials))
        DENIED.replace(serials)
        if self.ended_runs is not None and ends != self._saved_ends:
            save_run_ends(self.ended_runs, ends)
            self._saved_ends = ends

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except (OSError, ValueError, KeyError) as error:
                log.debug("revocation list not refreshed: %s", error)
            self._stop.wait(self.every_s)
