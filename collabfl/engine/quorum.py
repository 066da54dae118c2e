"""A federated run's quorum: how many participants a round needs, and how long to wait.

Without one, a run whose clients had all gone went on recording empty rounds (thousands a
minute) and ended "finished". Below its quorum a run pauses before the next round instead,
records who is missing, goes on when enough are back, and fails with a sentence saying so
once ``federation.quorum_wait_s`` has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from collabfl.engine.config import ConfigError, FederationConfig
from collabfl.engine.registry import REGISTRY

POLL_S = 1.0
"""How often a paused run asks the SuperLink who is online (one local call)."""


class QuorumLost(Exception):
    """Too few participants stayed online for the quorum wait: the run fails (the message
    names the quorum, the wait and who was missing)."""


@dataclass(frozen=True)
class Quorum:
    """``size``: the fewest members online for a round to start; ``wait_s``: how long a
    run below it waits before it fails."""

    size: int
    wait_s: float


def run_quorum(method: str, federation: FederationConfig, expected_clients: int) -> Quorum:
    """The quorum of a run of ``method`` with ``expected_clients`` asked for: the config's
    ``federation.quorum``, else the method's (at most the clients asked for)."""
    size = federation.quorum
    if size is None:
        size = min(REGISTRY.entry(method).quorum, expected_clients)
    elif size > expected_clients:
        raise ConfigError(
            f"federation.quorum is {size} but the run asks for {expected_clients} clients "
            "(--clients); give a quorum at most that"
        )
    return Quorum(size, federation.quorum_wait_s)


def missing(members: Collection[int], here: set[int], size: int) -> str:
    """Who keeps a run below its quorum: the members not online, else how many more must
    join (fewer joined than the quorum)."""
    gone = sorted(set(members) - here)
    if gone:
        return ", ".join(f"client {c}" for c in gone)
    return f"no member; {size - len(here)} more must join"


PauseSink = Callable[[str, str], None]
"""(kind, message): where a pause ("quorum_lost") and its end ("quorum_regained") go."""


def await_quorum(
    quorum: Quorum,
    members: Collection[int],
    here: set[int],
    recheck: Callable[[], set[int]],
    round_index: int,
    say: PauseSink,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once at least ``quorum.size`` members are online: ``here`` now, then what
    ``recheck()`` (which may admit new ones) says; raise QuorumLost after ``quorum.wait_s``
    below it. ``members``: every client of the run, for naming who is missing."""
    if len(here) >= quorum.size:
        return
    started = clock()
    say(
        "quorum_lost",
        f"paused before round {round_index}: {len(here)} of the {quorum.size} clients the "
        f"run needs (federation.quorum) are online; missing: "
        f"{missing(members, here, quorum.size)}; the run fails unless they are back within "
        f"{quorum.wait_s:g} s (federation.quorum_wait_s)",
    )
    while clock() - started < quorum.wait_s:
        sleep(POLL_S)
        here = recheck()
        if len(here) >= quorum.size:
            say(
                "quorum_regained",
                f"resumed before round {round_index} after {clock() - started:.0f} s with "
                f"{len(here)} clients online",
            )
            return
    raise QuorumLost(
        f"lost its quorum before round {round_index}: fewer than {quorum.size} clients "
        f"(federation.quorum) were online for {quorum.wait_s:g} s "
        f"(federation.quorum_wait_s); missing: {missing(members, here, quorum.size)}"
    )
