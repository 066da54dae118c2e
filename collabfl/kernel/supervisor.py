"""Keep a child process (SuperNode, SuperLink) running, and stop it cleanly.

Both daemons own one Flower process each. If it exits unexpectedly the supervisor restarts
it after a growing delay, capped (``RestartPolicy``: for ever, or at most ``max_restarts``
times in a row), and logs why in one line: what ``Reasons`` makes of the child's output
since it started, by default its last lines without colour codes or INFO chatter. A
problem the running child reports and retries by itself (a SuperNode that cannot reach
its SuperLink) is logged as it happens, if ``Reasons`` recognises it. On shutdown it sends
SIGTERM to the child's process group, waits, then SIGKILLs whatever is left, so Flower's
own helper processes (flower-superexec, ClientApp processes) go with it. What a daemon
killed outright leaves behind, its next start reaps (kernel/leftovers.py). The child's log
is rotated by size while it runs (kernel/log_rotation.py), so a daemon up for months keeps
a bounded amount of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import AnyStr, Protocol

from collabfl.kernel.atomic import write_text
from collabfl.kernel.log_rotation import LOG_KEEP, LOG_MAX_BYTES, rotate_copy

log = logging.getLogger(__name__)

HEALTHY_S = 60.0
"""A child that ran this long before it exited is counted as healthy: its restarts in a row
start again from the first, with the shortest delay."""
CHECK_S = 1.0
"""How often the output of a running child is read for problems it reports."""
LINGER_S = 10.0
"""How long a child may stay alive after its main program died of an uncaught
KeyboardInterrupt before it is killed: a Flower SuperNode that gives up signals itself, and
when the signal lands in its exit path the threads it started keep the process alive, doing
nothing, for good."""
OUTPUT_LIMIT = 64 * 1024
"""At most this much of a child's latest output is read to explain it."""
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
INFO_LINE = re.compile(r"^INFO\s*:")


def plain_lines(text: str, keep_info: bool = True) -> list[str]:
    """``text``'s non-blank lines without terminal colour codes (Flower colours its levels);
    ``keep_info=False`` also drops INFO lines (uvicorn's start and shutdown chatter)."""
    lines = (ANSI_ESCAPE.sub("", line).strip() for line in text.splitlines())
    return [line for line in lines if line and (keep_info or not INFO_LINE.match(line))]


def main_program_ended(output: str) -> bool:
    """Whether ``output`` ends a traceback of an uncaught KeyboardInterrupt: the interpreter
    prints the bare exception name last when the main thread dies of it."""
    return "KeyboardInterrupt" in plain_lines(output)


class Reasons(Protocol):
    """What a child's output means, as one line for the daemon's log."""

    def exited(self, output: str) -> str:
        """Why the child exited, from all it wrote since it started."""
        ...

    def refused(self, output: str) -> str | None:
        """A problem the running child reports in ``output`` (what it wrote since the last
        look) and retries by itself; None when there is nothing (new) to say."""
        ...


class LastWords:
    """The default ``Reasons``: a child's last three lines that are not INFO chatter."""

    def exited(self, output: str) -> str:
        return " | ".join(plain_lines(output, keep_info=False)[-3:]) or "nothing"

    def refused(self, output: str) -> str | None:
        return None


@dataclass(frozen=True)
class RestartPolicy:
    """How a child that keeps exiting is restarted: after 1, 2, 4, ... s up to
    ``backoff_max_s``; ``max_restarts`` in a row at most (None: for ever)."""

    max_restarts: int | None = 5
    backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0 or None, got {self.max_restarts}")
        if not 0 < self.backoff_max_s < float("inf"):
            raise ValueError(f"backoff_max_s must be positive, got {self.backoff_max_s}")

    def delay_s(self, in_a_row: int) -> float:
        return min(2.0 ** max(in_a_row - 1, 0), self.backoff_max_s)

    def gives_up(self, in_a_row: int) -> bool:
        return self.max_restarts is not None and in_a_row > self.max_restarts


class Supervisor:
    """Runs ``command`` in its own process group and restarts it when it dies."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        policy: RestartPolicy | None = None,
        on_give_up: Callable[[str], None] = lambda name: None,
        reasons: Reasons | None = None,
        before_start: Callable[[], None] | None = None,
        after_exit: Callable[[], None] | None = None,
        log_max_bytes: int = LOG_MAX_BYTES,
        log_keep: int = LOG_KEEP,
    ) -> None:
        self.name = name
        self.log_max_bytes = log_max_bytes
        self.log_keep = log_keep
        self.on_give_up = on_give_up
        """Called with the child's name once it is given up: a daemon that cannot do its job
        without the child exits, so that what runs the daemon (systemd, compose) sees it."""
        self.reasons = reasons or LastWords()
        self.before_start = before_start
        """Called before every start of the child (the first too), e.g. to clear what a
        killed predecessor left registered elsewhere; failures are logged, not raised."""
        self.after_exit = after_exit
        """Called as soon as the child exited unexpectedly, before the back-off: e.g. to tell
        others at once that it is gone, rather than when it starts again; failures are
        logged, not raised."""
        self.command = with_parent_death_signal(list(command))
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.policy = policy or RestartPolicy()
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._started_at = 0  # the log's size when the child started: its output follows
        self._read_to = 0  # how far the running child's output has been looked at
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._spawn()
        self._thread = threading.Thread(target=self._watch, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    @property
    def pid_file(self) -> Path:
        return self.log_path.with_suffix(".pid")

    def _call(self, hook: Callable[[], None] | None, doing: str) -> None:
        if hook is None:
            return
        try:
            hook()
        except Exception:
            log.exception("%s: %s failed; going on", self.name, doing)

    def _spawn(self) -> None:
        self._call(self.before_start, "preparing its start")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        rotate_copy(self.log_path, self.log_max_bytes, self.log_keep)
        with open(self.log_path, "ab") as log_file:
            self._started_at = self._read_to = log_file.tell()
            self.process = subprocess.Popen(
                self.command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        write_text(self.pid_file, str(self.process.pid))
        log.info("%s started (pid %s)", self.name, self.process.pid)

    def _watch(self) -> None:
        in_a_row = 0
        while not self._stopping.is_set():
            assert self.process is not None
            started = time.monotonic()
            code = self._wait_reporting(self.process)
            if self._stopping.is_set():
                return
            self._call(self.after_exit, "telling of its exit")
            in_a_row = 1 if time.monotonic() - started > HEALTHY_S else in_a_row + 1
            why = self.reasons.exited(self.output())
            if self.policy.gives_up(in_a_row):
                log.error(
                    "%s %s %s times in a row; giving up: %s (see %s)",
                    self.name, ended(code), in_a_row, why, self.log_path,
                )  # fmt: skip
                self.on_give_up(self.name)
                return
            delay = self.policy.delay_s(in_a_row)
            log.warning(
                "%s %s: %s; restarting in %.3g s (restart %s)",
                self.name, ended(code), why, delay, self.restarts + 1,
            )  # fmt: skip
            if self._stopping.wait(delay):
                return
            self.restarts += 1
            self._spawn()

    def _wait_reporting(self, process: subprocess.Popen[bytes]) -> int:
        """Wait for the child's exit code, logging what it reports as it runs, and kill it
        when it lingers ``LINGER_S`` after its main program died."""
        main_ended_at: float | None = None
        while True:
            try:
                return process.wait(timeout=CHECK_S)
            except subprocess.TimeoutExpired:
                pass
            if self._stopping.is_set():
                return process.wait()
            if rotate_copy(self.log_path, self.log_max_bytes, self.log_keep):
                self._started_at = self._read_to = 0  # its output goes on from the start
            new, self._read_to = self._tail(self._read_to)
            said = self.reasons.refused(new) if new else None
            if said:
                log.warning("%s: %s", self.name, said)
            if main_ended_at is None and main_program_ended(new):
                main_ended_at = time.monotonic()
            elif main_ended_at is not None and time.monotonic() - main_ended_at >= LINGER_S:
                self.kill_running(f"its main program died {LINGER_S:g} s ago, yet it lives on")
                main_ended_at = None

    def output(self) -> str:
        """What the child wrote since it started (its last ``OUTPUT_LIMIT`` bytes at most)."""
        return self._tail(self._started_at)[0]

    def _tail(self, start: int) -> tuple[str, int]:
        """The log from byte ``start`` (its last ``OUTPUT_LIMIT`` bytes at most), and its end."""
        try:
            with open(self.log_path, "rb") as log_file:
                end = log_file.seek(0, os.SEEK_END)
                log_file.seek(max(start, end - OUTPUT_LIMIT))
                return log_file.read(end - log_file.tell()).decode("utf-8", "replace"), end
        except OSError:
            return "", start

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill_running(self, why: str) -> None:
        """SIGKILL the running child's process group; it is restarted as after any death.
        For work that can no longer be delivered (the child holds a task of a dead peer
        process), where waiting for it to end would hold up the next."""
        if self.process is None or self.process.poll() is not None:
            return
        log.info("%s: %s; killing it (pid %s) to start afresh", self.name, why, self.process.pid)
        _kill_group(self.process.pid, signal.SIGKILL)

    def stop_restarting(self) -> None:
        """Restart the child no more (a daemon stopping several children calls this on all
        first, so that none is restarted while another is being stopped)."""
        self._stopping.set()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL after ``grace_s``."""
        self._stopping.set()
        if self.process is None:
            return
        stop_group(self.process, grace_s)
        if self._thread is not None:
            self._thread.join(timeout=1.0)


def ended(code: int) -> str:
    """How a child ended, from its exit status: "exited with 1", "was killed by SIGKILL"."""
    if code >= 0:
        return f"exited with {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def with_parent_death_signal(command: list[str]) -> list[str]:
    """Make the child be killed when the daemon dies, even by SIGKILL (Linux, util-linux).

    Without it a crashed daemon would leave its SuperNode or SuperLink running, orphaned,
    and a restarted daemon's new SuperLink would share the port with the old one. SIGKILL,
    not SIGTERM: Flower catches SIGTERM and may wait on its own children indefinitely.
    ``setpriv`` sets it in a clean exec'd process; doing it in a ``preexec_fn`` instead can
    deadlock a daemon whose gRPC threads are running when it forks.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return command
    return [setpriv, "--pdeathsig", "KILL", "--", *command]


def stop_group(process: subprocess.Popen[AnyStr], grace_s: float) -> None:
    """Terminate a process started with ``start_new_session=True`` and its group."""
    if process.poll() is not None:
        _kill_group(process.pid, signal.SIGKILL)  # leftovers of an exited leader
        return
    _kill_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning("pid %s ignored SIGTERM for %.0f s; killing", process.pid, grace_s)
    _kill_group(process.pid, signal.SIGKILL)
    process.wait(timeout=5)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
