"""The supervisor of a daemon's Flower children: restarts, backoff, and a loud give-up."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from collabfl.kernel.supervisor import RestartPolicy, Supervisor


def _wait(condition, what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit_s} s"
        time.sleep(0.05)


def test_a_killed_child_on_a_fresh_state_dir_is_restarted(tmp_path: Path) -> None:
    child = Supervisor("child", [sys.executable, "-c", "import time; time.sleep(600)"],
                       tmp_path / "logs" / "child.log")  # fmt: skip
    child.start()
    try:
        assert child.process is not None
        first = child.process.pid
        os.kill(first, signal.SIGKILL)
        _wait(lambda: child.restarts == 1 and child.alive, "a restart")
        assert child.process.pid != first
    finally:
        child.stop(grace_s=5)
    assert not child.alive


def test_a_killed_child_is_told_of_at_once_not_after_its_back_off(tmp_path: Path) -> None:
    """A killed SuperNode's node is marked offline as soon as it dies (the round in flight
    stops waiting for its lost reply then), not when the back-off lets it start again."""
    told: list[float] = []
    starts: list[float] = []
    child = Supervisor(
        "child", [sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "child.log",
        before_start=lambda: starts.append(time.monotonic()),
        after_exit=lambda: told.append(time.monotonic()),
    )  # fmt: skip
    child.start()
    try:
        assert child.process is not None
        os.kill(child.process.pid, signal.SIGKILL)
        _wait(lambda: child.restarts == 1 and child.alive, "a restart")
    finally:
        child.stop(grace_s=5)
    assert len(told) == 1 and len(starts) == 2  # a stop is not an unexpected exit
    assert starts[1] - told[0] >= RestartPolicy().delay_s(1)  # told before the back-off


def test_a_child_killed_on_purpose_is_started_afresh(tmp_path: Path) -> None:
    """An executor holding the task of a SuperNode that died is killed, not waited for."""
    child = Supervisor("executor", [sys.executable, "-c", "import time; time.sleep(600)"],
                       tmp_path / "executor.log")  # fmt: skip
    child.start()
    try:
        assert child.process is not None
        first = child.process.pid
        child.kill_running("its SuperNode died")
        _wait(lambda: child.restarts == 1 and child.alive, "a restart")
        assert child.process.pid != first
    finally:
        child.stop(grace_s=5)


def test_a_child_that_keeps_failing_is_given_up_with_its_last_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    said = "address 127.0.0.1:9093 already in use"
    command = [sys.executable, "-c", f"import sys; print({said!r}); sys.exit(3)"]
    given_up: list[str] = []
    child = Supervisor(
        "superlink", command, tmp_path / "superlink.log", policy=RestartPolicy(1, 0.1),
        on_give_up=given_up.append,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="collabfl.kernel.supervisor"):
        child.start()
        try:
            _wait(lambda: given_up == ["superlink"], "the give-up callback")
        finally:
            child.stop(grace_s=5)
    assert child.restarts == 1
    assert f"exited with 3: {said}; restarting in 0.1 s (restart 1)" in caplog.text
    assert f"exited with 3 2 times in a row; giving up: {said}" in caplog.text


def test_by_default_a_failing_child_is_restarted_for_ever_and_each_exit_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The old policy gave up after 5 restarts in a row (about a minute); a client's
    SuperNode must outlive that: what keeps it out is fixed by others, later."""
    said = "\x1b[91mERROR \x1b[0m:     [code: 2004] Failed to activate SuperNode."
    command = [sys.executable, "-c", f"import sys; print({said!r}); sys.exit(1)"]
    starts: list[float] = []
    given_up: list[str] = []
    child = Supervisor(
        "supernode", command, tmp_path / "supernode.log",
        policy=RestartPolicy(max_restarts=None, backoff_max_s=0.05),
        on_give_up=given_up.append, before_start=lambda: starts.append(time.monotonic()),
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="collabfl.kernel.supervisor"):
        child.start()
        try:
            _wait(lambda: child.restarts >= 3 * 6, "three times the old give-up")
        finally:
            child.stop(grace_s=5)
    assert given_up == []
    assert len(starts) == child.restarts + 1  # before every start, the first too
    exits = [r.getMessage() for r in caplog.records if "exited with 1" in r.getMessage()]
    assert len(exits) >= 3 * 6
    # Each exit is one line naming this start's words only, without colour codes.
    assert all(m.startswith("supernode exited with 1: ERROR :     [code: 2004]") for m in exits)
    assert all("\x1b" not in m and m.count("Failed to activate") == 1 for m in exits)


def test_what_a_running_child_reports_is_logged_as_it_happens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    class Reasons:
        def exited(self, output: str) -> str:
            return "done"

        def refused(self, output: str) -> str | None:
            seen.append(output)
            return "cannot reach it" if "retrying" in output else None

    script = "import time\nfor _ in range(3): print('retrying', flush=True); time.sleep(0.5)\n"
    script += "time.sleep(600)"
    child = Supervisor(
        "supernode", [sys.executable, "-c", script], tmp_path / "supernode.log",
        reasons=Reasons(),
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="collabfl.kernel.supervisor"):
        child.start()
        try:
            _wait(lambda: "".join(seen).count("retrying") == 3, "three retries read")
        finally:
            child.stop(grace_s=5)
    assert "supernode: cannot reach it" in caplog.text
    assert child.restarts == 0


def test_a_child_told_to_stop_restarting_is_not_restarted_when_it_exits(tmp_path: Path) -> None:
    """A daemon stops its children one after the other (the executor may take seconds);
    one that exits meanwhile must not be started again."""
    go = tmp_path / "exit-now"
    script = f"import os, sys, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    script += "sys.exit(1)"
    child = Supervisor(
        "supernode", [sys.executable, "-c", script], tmp_path / "supernode.log",
        policy=RestartPolicy(max_restarts=None, backoff_max_s=0.05),
    )  # fmt: skip
    child.start()
    try:
        child.stop_restarting()
        go.touch()
        assert child._thread is not None
        _wait(lambda: not child._thread.is_alive(), "the watcher's end")
        assert child.restarts == 0 and not child.alive
    finally:
        child.stop(grace_s=5)


LINGERING = """
import threading, time
threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon thread
raise KeyboardInterrupt  # the main program dies; the thread keeps the process alive
"""


def test_a_child_whose_main_program_died_but_lives_on_is_killed_and_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Flower SuperNode that gives up signals itself; when the signal lands in its exit
    path, the uvicorn thread it started keeps it alive and idle for good."""
    monkeypatch.setattr("collabfl.kernel.supervisor.LINGER_S", 0.5)
    child = Supervisor("child", [sys.executable, "-c", LINGERING], tmp_path / "child.log")
    child.start()
    try:
        assert child.process is not None
        first = child.process.pid
        _wait(
            lambda: child.process is not None and child.process.pid != first and child.alive,
            "a restart of the lingering child",
            limit_s=60,
        )
        assert child.restarts >= 1
    finally:
        child.stop(grace_s=5)
