"""Keep this daemon's deny list (kernel/revocation.py) and ended runs in step with the
coordinator's.

The coordinator publishes the serials of revoked certificates and the runs that have ended
on its public port (``GET /collabfl/v1/revoked``, over TLS verified against the federation
CA). A client daemon asks for them at start and every ``every_s`` after, so that within that
time its peer server refuses a revoked member and its ClientApp (another process, which
reads the ``ended_runs`` file) an ended run's ticket; a failed ask keeps what it has.

The list also tells the daemon when its own member was revoked: Flower only says that its
SuperNode "failed to activate", so the daemon's log says "revoked" and what brings it back.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import threading
from pathlib import Path

from collabfl.kernel.join_client import new_invite
from collabfl.kernel.netprobe import split_address
from collabfl.kernel.revocation import DENIED
from collabfl.kernel.tickets import RunEnd, run_ends_from_json, save_run_ends

log = logging.getLogger(__name__)

REVOKED_PATH = "/collabfl/v1/revoked"
EVERY_S = 15.0


def revoked_line(client_id: int) -> str:
    """The daemon's words for its own revocation, with the remedy."""
    remedy = new_invite("member", str(client_id))
    return (
        f"client {client_id} was revoked by the federation's operator: the coordinator refuses "
        f"its SuperNode and its peers refuse its certificate; {remedy}, then join again with "
        "`collabfl-client join ... --re-enrol`"
    )


class RevocationPoller:
    """Refreshes ``DENIED``, and the file ``ended_runs`` when given, from the coordinator at
    ``address`` until stopped. ``own``: this member's (client id, certificate serial in
    lowercase hex), so that its revocation is logged once, as an error, when it is learned."""

    def __init__(
        self,
        address: str,
        ca: Path,
        every_s: float = EVERY_S,
        ended_runs: Path | None = None,
        own: tuple[int, str] | None = None,
    ) -> None:
        self.own = own
        self.revoked = False
        """Whether this member's certificate is on the list (as last read)."""
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
        if self.own is not None:
            revoked = self.own[1] in {s.lower() for s in serials}
            if revoked and not self.revoked:
                log.error("%s", revoked_line(self.own[0]))
            self.revoked = revoked
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
