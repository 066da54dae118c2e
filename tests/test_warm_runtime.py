"""The client daemons' warm runtime as real processes: a killed executor is a crash the
daemon recovers from, and every message is then served by the one restarted process."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from rich.console import Console

from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec
from collabfl.launcher.federation import LocalFederation, run_on_federation, write_client_files

pytestmark = pytest.mark.federation

SETTINGS = [
    "data.num_train=600",
    "data.num_test=300",
    "data.num_clients=2",
    "rounds=2",
    "epochs=0.5",
    "dpfl.init_epochs=1",
    "dpfl.budget=1",
]


def _executor_pid(state_dir: Path) -> int | None:
    """The pid of the daemon's executor when it is running, else None."""
    try:
        pid = int((state_dir / "executor.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    running = b"collabfl.flower.warm_executor" in cmdline and ") Z" not in stat
    return pid if running else None


def _wait_for_new_executor(
    state_dir: Path, old: int | None = None, timeout_s: float = 120.0
) -> int:
    """The pid of a running executor other than ``old`` (None: any), once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = _executor_pid(state_dir)
        if pid is not None and pid != old:
            return pid
        time.sleep(0.2)
    raise AssertionError(f"no new executor in {state_dir} within {timeout_s:.0f} s")


def test_killed_executor_is_restarted_and_serves_the_whole_run(tmp_path):
    config = load_config(None, [*SETTINGS, f"data.cache_dir={json.dumps(str(tmp_path))}"])
    files = write_client_files(config, tmp_path / "data")
    with LocalFederation(tmp_path / "work", files, runtime="warm") as federation:
        state_dir = federation.work_dir / "client-0"
        # The daemon starts its executor once its SuperNode has joined, which is also when
        # the federation counts the client as up: the executor may come a moment later.
        killed = _wait_for_new_executor(state_dir)
        os.kill(killed, signal.SIGKILL)
        restarted = _wait_for_new_executor(state_dir, killed)
        console = Console(file=io.StringIO())
        spec = parse_method_spec("dpfl", config)
        run_on_federation(federation, spec, tmp_path / "out", console, timeout_s=600)
        assert _executor_pid(state_dir) == restarted  # alive, and no further restart

    log = (state_dir / "executor.log").read_text()
    handled = re.findall(r"task (\w+) by pid (\d+)", log)
    assert len(handled) == 1 + 2, log  # set-up, then one message (a program) per round
    assert {status for status, _ in handled} == {"completed"}, log
    assert {int(pid) for _, pid in handled} == {restarted}, log
