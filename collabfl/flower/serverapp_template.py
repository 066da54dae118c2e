"""Fork each run's ServerApp from a template that has imported it already.

A fresh ``flwr-serverapp`` imports Flower, torch and collabfl's ServerApp before it serves
its run: about 6 CPU-seconds on a 2-core machine, paid by every run, and for a federation's
first run on the critical path while its clients start on the same cores. The template
pays them once, when the coordinator starts, then forks one child per ServerApp that runs
Flower's own ``flwr-serverapp`` entry point with the flags the launcher chose. A child is a
ServerApp in every other way: its own process, log, token file and exit status.

The template stays resident while the coordinator runs (about 350 MiB with torch on this
machine); its children share those pages until they write them.

Only the launcher (flower/serverapp_launcher.py) talks to the template, through pipes no
other process holds; nothing listens on a socket. Each JSON line on the template's stdin
asks for one child (``{"argv": [...], "log": path}``); the template answers with a line
``{"started": pid}``, and ``{"exited": pid, "code": n}`` when that child ends. A closed
stdin (the coordinator stopped or died) ends the template; its children watch the
coordinator's pid themselves (``--parent-pid``), as a directly started ServerApp does.

    python -m collabfl.flower.serverapp_template --preload collabfl.apps.server_app
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, NoReturn

from collabfl.kernel.leftovers import start_ticks
from collabfl.kernel.python_command import module_command
from collabfl.kernel.supervisor import with_parent_death_signal

PROGRAM = "flwr-serverapp"
"""The name a child's ``sys.argv[0]`` and its log lines give it."""
REAP_S = 0.2
"""How often the template looks for children that ended while no request comes."""


class ForkedServerApp:
    """A ServerApp the template forked: the parts of ``subprocess.Popen`` the launcher uses.

    The template, not the coordinator, is its parent, so its exit code arrives as the
    template's ``exited`` line. Once the template has gone away (``orphaned``), a child that
    is gone from ``/proc`` counts as ended with code -1. Signals go only to the process that
    started under ``pid`` (its start time is kept), never to a later one reusing the pid.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = start_ticks(pid)
        self.returncode: int | None = None
        self.orphaned = False
        self._ended = threading.Event()

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and self.orphaned and start_ticks(self.pid) != self.started:
            self.ended(-1)  # reaped by no one we can hear from: the template is gone
        return self.returncode

    def wait(self, timeout: float) -> int:
        """The exit code; TimeoutError if the child still runs after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"ServerApp {self.pid} still runs after {timeout:g} s")
            self._ended.wait(min(REAP_S, left))
        return code

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, number: signal.Signals) -> None:
        if self.poll() is None and start_ticks(self.pid) == self.started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)


class ServerAppTemplate:
    """The launcher's side: starts the template (again, if it died) and forks from it.

    ``env``: the template's environment, which every child inherits (Flower's home, the
    daemon's owner variable that kernel/leftovers.py finds leftovers by). ``log_path``:
    where the template's own output goes (each child's goes where its request says).
    """

    def __init__(self, preload: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.preload = list(preload)
        self.env = dict(env)
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._started: queue.Queue[ForkedServerApp | None] = queue.Queue()
        self._lock = threading.Lock()  # the template process, between fork and stop
        self._forking = threading.Lock()  # one request at a time: replies come in order
        self._stopped = threading.Event()

    def start(self) -> None:
        """Start the template now, so that it has imported the ServerApp before a run needs it."""
        with self._lock:
            self._ensure_running()

    def fork(self, argv: Sequence[str], log_path: Path, timeout_s: float) -> ForkedServerApp:
        """A ServerApp running ``flwr-serverapp argv`` with its output in ``log_path``.

        ``timeout_s`` covers a template that is still importing (it started with the
        coordinator, or again just now). A template that died is started again, once per
        request. RuntimeError if none answers in time, or once ``stop`` was called.
        """
        request = json.dumps({"argv": list(argv), "log": str(log_path)}).encode() + b"\n"
        with self._forking:
            for _ in range(2):
                with self._lock:
                    if self._stopped.is_set():
                        raise RuntimeError("the ServerApp template was stopped")
                    process, started = self._ensure_running(), self._started
                    assert process.stdin is not None
                    try:
                        process.stdin.write(request)
                        process.stdin.flush()
                    except BrokenPipeError:
                        continue  # it died since it was last asked: start another
                try:
                    child = started.get(timeout=timeout_s)
                except queue.Empty:
                    self._discard(process)  # its late answer would be the next request's
                    raise RuntimeError(
                        f"the ServerApp template did not start a ServerApp within {timeout_s:g} s"
                    ) from None
                if child is not None:
                    return child
        raise RuntimeError("the ServerApp template ended twice before it started a ServerApp")

    def stop(self) -> None:
        """End the template now, importing or not; its children are the launcher's to stop,
        and a ``fork`` waiting on it raises."""
        self._stopped.set()
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        process.terminate()  # a child of its is a process of its own: it goes on
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _discard(self, process: subprocess.Popen[bytes]) -> None:
        """Kill ``process``, a template that did not answer; the next request starts another."""
        with self._lock:
            if self._process is process:
                self._process = None
        process.kill()
        process.wait()

    def _ensure_running(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        with open(self.log_path, "ab") as output:
            process = subprocess.Popen(
                with_parent_death_signal(template_command(self.preload)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=output, env=self.env,
            )  # fmt: skip
        self._started = queue.Queue()  # a reply the dead template still owed is void
        assert process.stdout is not None
        threading.Thread(
            target=_read_replies, args=(process.stdout, self._started),
            name="serverapp-template", daemon=True,
        ).start()  # fmt: skip
        self._process = process
        return process


def _read_replies(stream: IO[bytes], started: queue.Queue[ForkedServerApp | None]) -> None:
    """Hand each child one template started to ``fork``, and record each exit, in the
    template's order: a child's ``started`` line always comes before its ``exited`` line.
    When the template is gone, a ``fork`` still waiting hears None."""
    children: dict[int, ForkedServerApp] = {}
    for line in stream:
        try:
            reply = json.loads(line)
        except ValueError:
            continue  # nothing else writes there, but never die of it
        if "started" in reply:
            child = children[int(reply["started"])] = ForkedServerApp(int(reply["started"]))
            started.put(child)
        elif "exited" in reply and int(reply["exited"]) in children:
            children.pop(int(reply["exited"])).ended(int(reply["code"]))
    for child in children.values():  # the template is gone: nobody reports these any more
        child.orphaned = True
    started.put(None)


def template_command(preload: Sequence[str]) -> list[str]:
    """The template's command line, importing the modules ``preload`` names at its start."""
    flags = [arg for module in preload for arg in ("--preload", module)]
    return module_command("collabfl.flower.serverapp_template", *flags)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="collabfl.flower.serverapp_template", description=__doc__)
    parser.add_argument("--preload", action="append", default=[], help="a module to import")
    args = parser.parse_args(argv)
    from flwr.superlink.cli import flwr_serverapp

    for module in args.preload:
        importlib.import_module(module)
    # numpy's OpenBLAS keeps an idle thread pool, which it shuts down around a fork itself
    # (pthread_atfork); Python 3.12+ would warn at every fork because the thread exists.
    warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], REAP_S)
        _reap()
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0  # the launcher closed our stdin: its coordinator stopped or died
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _serve(flwr_serverapp, list(request["argv"]), Path(request["log"]))
            _reply({"started": pid})


def _reply(message: dict[str, int]) -> None:
    """One line to the launcher, on the pipe that is our stdout (children write elsewhere)."""
    os.write(1, json.dumps(message).encode() + b"\n")


def _reap() -> None:
    """Report every child that ended (and so never leave a zombie)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _serve(entry_point: Callable[[], None], argv: list[str], log_path: Path) -> NoReturn:
    """In the child: Flower's ``flwr-serverapp`` with ``argv``, output to ``log_path``."""
    code = 1
    try:
        output = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.close(nothing)
        _fresh_randomness()
        sys.argv = [PROGRAM, *argv]
        entry_point()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _fresh_randomness() -> None:
    """What a fresh process would have: numpy's global generator seeded from the OS, not
    the template's state shared by every child (Python's ``random`` reseeds at fork)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


if __name__ == "__main__":
    sys.exit(main())
