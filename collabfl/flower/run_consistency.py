"""Cheap checks that a member's reports agree with themselves across the rounds of one run.

A member reports its training samples at set-up, again whenever it rejoins (a restarted
daemon comes back as a new node and is set up again), and with every training reply. Its
data does not change within a run, so neither may the count: a liar who joins honestly and
then rejoins claiming more would otherwise move every size-weighted decision from then on.
The first count a member reports in a run is kept, with the count the ServerApp accepted for
it (reported_sizes.py may have replaced it); a later report that differs keeps the first
accepted count, and the caller records an ``anomaly`` naming the member and both values,
once per differing value. The ledger lives as long as the ServerApp: a relaunched run sets
its members up afresh.
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
        return self.first[client_id][1], self.disagreement(client_id, reported)

    def disagreement(self, client_id: int, reported: int) -> str | None:
        """Why ``reported`` is an anomaly: it differs from the member's first report in this
        run (None when it agrees, the member is unknown, or this value was already said)."""
        if client_id not in self.first:
            return None
        first, accepted = self.first[client_id]
        if reported == first or (client_id, reported) in self._said:
            return None
        self._said.add((client_id, reported))
        return (
            f"reported {reported} training samples, {first} earlier in this run: a member's "
            f"data does not change within a run; keeping {accepted}"
        )
