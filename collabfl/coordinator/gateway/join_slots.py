"""The joins the public port serves at once: a bound in all and a smaller share per address.

A join holds a worker thread and its connection until its body is in (the port's body
deadline, a minute) and the enrolment is done; joins are admitted one at a time anyway
(coordinator/enrolment/enrolment.py). With only a bound in all, one address held every slot with
slow bodies and kept every other machine from joining; with a share per address, it takes that
many addresses. Several labs behind one NAT share an address: beyond their share they get a
503 with ``Retry-After``, which ``collabfl-client join`` waits out.
"""

from __future__ import annotations

from collections import Counter

MAX_JOINS_IN_FLIGHT = 8
MAX_JOINS_PER_ADDRESS = 2


class JoinSlots:
    """Counts the joins being served, in all and per address (the event loop's thread
    alone touches it)."""

    def __init__(
        self, total: int = MAX_JOINS_IN_FLIGHT, per_address: int = MAX_JOINS_PER_ADDRESS
    ) -> None:
        self.total = total
        self.per_address = per_address
        self._held: Counter[str] = Counter()

    def take(self, address: str) -> str | None:
        """Take a slot for a join from ``address``; when there is none, why not."""
        in_all = self._held.total()
        if in_all >= self.total:
            return f"{in_all} joins are being served, the most at once: try again"
        if self._held[address] >= self.per_address:
            return (
                f"{self._held[address]} joins from {address} are being served, the most one "
                "address may have at once: try again"
            )
        self._held[address] += 1
        return None

    def give_back(self, address: str) -> None:
        """The join from ``address`` is done."""
        self._held[address] -= 1
        if not self._held[address]:
            del self._held[address]
