"""The supervisor of a daemon's Flower children: restarts, backoff, and a loud give-up."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from collabfl.kernel.supervisor import Supervisor


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


def test_a_child_that_keeps_failing_is_given_up_with_its_last_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    said = "address 127.0.0.1:9093 already in use"
    command = [sys.executable, "-c", f"import sys; print({said!r}); sys.exit(3)"]
    given_up: list[str] = []
    child = Supervisor(
        "superlink", command, tmp_path / "superlink.log", max_restarts=1,
        on_give_up=given_up.append,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="collabfl.kernel.supervisor"):
        child.start()
        try:
            _wait(lambda: given_up == ["superlink"], "the give-up callback")
        finally:
            child.stop(grace_s=5)
    assert child.restarts == 1
    assert f"exited with 3 ({said}); restarting" in caplog.text
    assert "exited with 3 2 times in a row; giving up" in caplog.text and said in caplog.text
