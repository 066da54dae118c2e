"""Kill the processes a daemon killed earlier on the same state dir left behind.

A SIGKILLed daemon takes its direct children with it (their parent-death signal), but not
what those started: Flower's SuperExec runs in a session of its own, and it and the
ServerApp or ClientApp processes it starts watch their parent with ``kill(pid, 0)``, which
a zombie parent passes for ever where nobody reaps it (a container's init). They stay,
reparented, retrying their connection. Pids and process groups are reused, so neither tells
whose such a process is; instead every process a daemon starts inherits ``OWNER_VARIABLE``,
which names the daemon (pid and start time) and its resolved state dir. At start-up a
daemon kills each process that names its own state dir and a daemon no longer running. A
process of another state dir, or of a daemon that still runs, is never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_VARIABLE = "COLLABFL_DAEMON_OWNER"
PROC = Path("/proc")


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot); None if it is gone or a zombie.

    A pid and its start time name one process for good: a reused pid starts later.
    """
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    return None if fields[0] == "Z" else int(fields[19])


@dataclass(frozen=True)
class Owner:
    """The daemon a process was started for, as its ``OWNER_VARIABLE`` names it."""

    pid: int
    started: int
    state_dir: str

    def encode(self) -> str:
        return f"{self.pid}:{self.started}:{self.state_dir}"

    @classmethod
    def decode(cls, text: str) -> Owner | None:
        pid, started, state_dir = [*text.split(":", 2), "", ""][:3]
        if not (pid.isdigit() and started.isdigit() and state_dir):
            return None
        return cls(int(pid), int(started), state_dir)

    @property
    def running(self) -> bool:
        return start_ticks(self.pid) == self.started


def owner_env(state_dir: Path) -> dict[str, str]:
    """The variable every child of this daemon (on ``state_dir``) must inherit."""
    pid = os.getpid()
    started = start_ticks(pid)
    if started is None:  # no /proc: nothing could find the children by it either
        return {}
    return {OWNER_VARIABLE: Owner(pid, started, str(state_dir.resolve())).encode()}


def owner_of(pid: int) -> Owner | None:
    """The daemon ``pid`` was started for, from the environment it started with."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return None
    prefix = OWNER_VARIABLE.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return Owner.decode(entry[len(prefix) :].decode("utf-8", "replace"))
    return None


def reap_leftovers(state_dir: Path, wait_s: float = 10.0, scans: int = 5) -> list[int]:
    """SIGKILL every leftover of a dead daemon on ``state_dir``; the pids killed.

    Each candidate is held by a pidfd before its environment is read, so the signal reaches
    the process that was checked even if its pid is reused meanwhile. A leftover may start a
    child between a scan and its kill: the child inherits the variable, and the next scan
    finds it. Returns once the killed processes have exited (or after ``wait_s``).
    """
    if not PROC.is_dir():
        return []
    mine = str(state_dir.resolve())
    killed: dict[int, int] = {}
    for _ in range(scans):
        found = _kill_leftovers(mine, exclude=set(killed))
        if not found:
            break
        killed.update(found)
    if killed:
        log.warning("killed %s process(es) left over by a previous daemon on %s: %s",
                    len(killed), mine, sorted(killed))  # fmt: skip
    _wait_exited(list(killed.values()), wait_s)
    for fd in killed.values():
        os.close(fd)
    return sorted(killed)


def _kill_leftovers(state_dir: str, exclude: set[int]) -> dict[int, int]:
    """One scan of /proc: SIGKILL the leftovers on ``state_dir``; their pids and pidfds."""
    killed = {}
    skip = exclude | {os.getpid()}
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        owner = owner_of(pid)
        if owner is None or owner.state_dir != state_dir or owner.running:
            os.close(fd)
            continue
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        killed[pid] = fd
    return killed


def _wait_exited(pidfds: list[int], wait_s: float) -> None:
    """A pidfd turns readable when its process exits."""
    deadline = time.monotonic() + wait_s
    waiting = list(pidfds)
    while waiting and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(waiting, [], [], left)
        waiting = [fd for fd in waiting if fd not in ready]
