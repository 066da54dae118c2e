"""Cheap checks that a member's reports agree with themselves across the rounds of one run.

A member reports its training samples at set-up, again whenever it rejoins (a restarted
daemon comes back as a new node and is set up again), and with every training reply. Its
data does not change within a run, so neither may the count. Of a member's reports, the
lowest is believed: inflating a count is the lie that buys weight, and a lower report only
costs the member its own; so a liar who joins claiming more is brought down by its first
honest reply, and one who rejoins claiming more keeps its lower count. A report that differs
from the first makes the caller record an ``anomaly`` naming the member and both values,
once per differing value. The first report goes through the declared-size check
(reported_sizes.py). The ledger lives as long as the ServerApp: a relaunched run sets its
members up afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class FirstCounts:
    """Per member: the first training-sample count it reported in this run, and the count
    the run accepted for it."""

    first: dict[int, tuple[int, int]] = field(default_factory=dict)
    _said: set[tuple[int, int]] = field(default_factory=set)

    def admit(
        self, client_id: int, reported: int, accept: Callable[[int], tuple[int, str | None]]
    ) -> tuple[int, str | None]:
        """The count to use for a set-up report and, when it is not what was reported, why.

        A member's first report goes through ``accept`` (the declared-size check); a later
        one is held to the first.
        """
        if client_id not in self.first:
            accepted, why = accept(reported)
            self.first[client_id] = (reported, accepted)
            return accepted, why
        why = self.disagreement(client_id, reported)
        self.lower(client_id, reported)
        return self.first[client_id][1], why

    def lower(self, client_id: int, reported: int) -> int | None:
        """The member's new count when ``reported`` is below the one kept (None: no change)."""
        if client_id not in self.first or reported < 1:
            return None
        first, kept = self.first[client_id]
        if reported >= kept:
            return None
        self.first[client_id] = (first, reported)
        return reported

    def disagreement(self, client_id: int, reported: int) -> str | None:
        """Why ``reported`` is an anomaly: it differs from the member's first report in this
        run (None when it agrees, the member is unknown, or this value was already said)."""
        if client_id not in self.first:
            return None
        first, kept = self.first[client_id]
        if reported == first or (client_id, reported) in self._said:
            return None
        self._said.add((client_id, reported))
        return (
            f"reported {reported} training samples, {first} earlier in this run: a member's "
            f"data does not change within a run; keeping the lowest, {min(kept, max(reported, 1))}"
        )
