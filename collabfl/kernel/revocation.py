"""The serials of revoked certificates, as this process knows them.

Every server of collabfl reads a caller's identity through
``collabfl.kernel.identity.caller_identity``; that one seam consults this list, so a revoked
certificate counts as no certificate on the coordinator service, the sub-step relay and
every peer server alike. The coordinator fills it from its enrolment records; a client
daemon from the coordinator's published list (``client/revocations.py``), which it asks
for again every little while.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from cryptography import x509


def serial_hex(certificate: x509.Certificate) -> str:
    """The certificate's serial number as lowercase hex: the list's key."""
    return format(certificate.serial_number, "x")


class DenyList:
    """A thread-safe set of revoked certificate serials (lowercase hex)."""

    def __init__(self) -> None:
        self._serials: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def replace(self, serials: Iterable[str]) -> None:
        """Take ``serials`` as the whole list (it only ever grows at the source)."""
        fresh = frozenset(s.lower() for s in serials)
        with self._lock:
            self._serials = fresh

    def denies(self, certificate: x509.Certificate) -> bool:
        return serial_hex(certificate) in self._serials

    def __len__(self) -> int:
        return len(self._serials)


DENIED = DenyList()
"""This process's list: the daemons fill it, ``caller_identity`` consults it."""
