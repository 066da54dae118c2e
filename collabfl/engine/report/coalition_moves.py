"""How a run's coalitions changed between two rounds, client by client.

Coalition indices follow first members, so they shift whenever coalitions change; comparing
indices would report every client of a renumbered coalition as moved. Instead each old
coalition gets one successor, the new coalition that took most of its members, and a client
counts as moved only when it did not follow its coalition to that successor. Joiners (in no
coalition before) and leavers (in none after) are always reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Partition = Sequence[Sequence[int]]
"""One round's coalitions: each a list of client ids, indexed by position."""


@dataclass(frozen=True)
class CoalitionMove:
    """A client's coalition change between two rounds; None: not in any coalition then."""

    client: int
    before: int | None
    after: int | None


def coalition_moves(before: Partition, after: Partition) -> list[CoalitionMove]:
    """Joiners, leavers and clients that left their coalition's successor, by client."""
    old = {c: k for k, members in enumerate(before) for c in members}
    new = {c: k for k, members in enumerate(after) for c in members}
    successor = _successors(before, after)
    moves = []
    for client in sorted(old.keys() | new.keys()):
        was, now = old.get(client), new.get(client)
        if was is None or now is None or successor.get(was) != now:
            moves.append(CoalitionMove(client, was, now))
    return moves


def _successors(before: Partition, after: Partition) -> dict[int, int]:
    """Old coalition index -> new one, matching the largest overlaps first."""
    overlaps = sorted(
        (
            (len(set(old) & set(new)), k, j)
            for k, old in enumerate(before)
            for j, new in enumerate(after)
        ),
        key=lambda item: -item[0],  # stable: ties keep (old, new) index order
    )
    successor: dict[int, int] = {}
    for shared, k, j in overlaps:
        if shared and k not in successor and j not in successor.values():
            successor[k] = j
    return successor


def describe_moves(moves: Sequence[CoalitionMove]) -> list[str]:
    """One phrase per kind of change, e.g. 'client 5 joined coalition 1'."""
    groups: dict[tuple[int | None, int | None], list[int]] = {}
    for move in moves:
        groups.setdefault((move.before, move.after), []).append(move.client)
    phrases = []
    for (before, after), clients in groups.items():
        who = f"client {clients[0]}" if len(clients) == 1 else f"clients {join_clients(clients)}"
        if before is None:
            phrases.append(f"{who} joined coalition {after}")
        elif after is None:
            phrases.append(f"{who} left coalition {before}")
        else:
            phrases.append(f"{who} moved from coalition {before} to coalition {after}")
    return phrases


def join_clients(clients: Sequence[int]) -> str:
    """Client ids as one comma-separated phrase: '2, 3, 4'."""
    return ", ".join(map(str, clients))


def coalitions_document(
    run_id: str,
    shown: int,
    history: Mapping[int, Partition],
    previous: int | None,
    moves: Sequence[CoalitionMove],
) -> dict[str, Any]:
    """Round ``shown``'s coalitions and the per-client changes since round ``previous``."""
    return {
        "run_id": run_id,
        "round": shown,
        "coalitions": history[shown],
        "previous_round": previous,
        "changes": [{"client": m.client, "from": m.before, "to": m.after} for m in moves],
    }
