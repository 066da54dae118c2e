"""Keep a child process (SuperNode, SuperLink) running, and stop it cleanly.

Both daemons own one Flower process each. If it exits unexpectedly the supervisor restarts
it after a growing delay (at most ``max_restarts`` times in a row); on shutdown it sends
SIGTERM to the child's process group, waits, then SIGKILLs whatever is left, so Flower's
own helper processes (flower-superexec, ClientApp processes) go with it. What a daemon
killed outright leaves behind, its next start reaps (kernel/leftovers.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class Supervisor:
    """Runs ``command`` in its own process group and restarts it when it dies."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        max_restarts: int = 5,
        on_give_up: Callable[[str], None] = lambda name: None,
    ) -> None:
        self.name = name
        self.on_give_up = on_give_up
        """Called with the child's name once it is given up: a daemon that cannot do its job
        without the child exits, so that what runs the daemon (systemd, compose) sees it."""
        self.command = with_parent_death_signal(list(command))
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.max_restarts = max_restarts
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._spawn()
        self._thread = threading.Thread(target=self._watch, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    @property
    def pid_file(self) -> Path:
        return self.log_path.with_suffix(".pid")

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                self.command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.pid_file.write_text(str(self.process.pid))
        log.info("%s started (pid %s)", self.name, self.process.pid)

    def _watch(self) -> None:
        consecutive = 0
        while not self._stopping.is_set():
            assert self.process is not None
            started = time.monotonic()
            code = self.process.wait()
            if self._stopping.is_set():
                return
            consecutive = 0 if time.monotonic() - started > 60 else consecutive + 1
            said = self.last_output()
            if consecutive > self.max_restarts:
                log.error(
                    "%s exited with %s %s times in a row; giving up. Its last words: %s (see %s)",
                    self.name,
                    code,
                    consecutive,
                    said,
                    self.log_path,
                )
                self.on_give_up(self.name)
                return
            delay = min(2.0**consecutive, 30.0)
            log.warning(
                "%s exited with %s (%s); restarting in %.0f s", self.name, code, said, delay
            )
            if self._stopping.wait(delay):
                return
            self.restarts += 1
            self._spawn()

    def last_output(self, lines: int = 3) -> str:
        """The end of the child's log, on one line: why it exited, usually."""
        try:
            with open(self.log_path, "rb") as log_file:
                log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - 4096))
                tail = log_file.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return "no log"
        said = [line.strip() for line in tail if line.strip()][-lines:]
        return " | ".join(said) or "nothing"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL after ``grace_s``."""
        self._stopping.set()
        if self.process is None:
            return
        stop_group(self.process, grace_s)
        if self._thread is not None:
            self._thread.join(timeout=1.0)


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


def stop_group(process: subprocess.Popen, grace_s: float) -> None:
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
