"""Every command and daemon follows one exit-status convention (kernel/exit_status.py).

2: the input or the usage was wrong and nothing ran; 1: a failure while running. Each case
runs the installed program as a user would and reads its status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from collabfl.kernel import exit_status

pytestmark = pytest.mark.federation

BIN = Path(sys.executable).parent


BAD_INPUT = {
    "a --set value of the wrong type": ["collabfl", "simulate", "--set", "rounds=x"],
    "an unknown method": ["collabfl", "compare", "--methods", "nope"],
    "federation up without clients": ["collabfl", "federation", "up", "--clients", "0"],
    "the coordinator without a state dir": ["collabfl-coordinator"],
    "the coordinator with a missing certificate": [
        "collabfl-coordinator", "--state-dir", "{tmp}/c", "--ssl-certfile", "/nonexistent.pem",
    ],
    "the client daemon without its flags": ["collabfl-client"],
    "a join with its token on the command line": [
        "collabfl-client", "join", "127.0.0.1:1", "--token", "not-a-token",
        "--data", "/nonexistent.npz", "--state-dir", "{tmp}/j",
    ],
    "a join with no token": [
        "collabfl-client", "join", "127.0.0.1:1", "--data", "/nonexistent.npz",
        "--state-dir", "{tmp}/j",
    ],
}  # fmt: skip


@pytest.mark.parametrize("argv", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_exits_2_before_anything_runs(argv: list[str], tmp_path: Path) -> None:
    command = [str(BIN / argv[0]), *(a.format(tmp=tmp_path) for a in argv[1:])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=os.environ)
    assert done.returncode == exit_status.USAGE, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "c" / "coordinator.db").exists()


def test_a_coordinator_out_of_reach_is_a_failure_at_run_time(closed_port: int) -> None:
    command = [str(BIN / "collabfl"), "admin", "--coordinator", f"127.0.0.1:{closed_port}"]
    done = subprocess.run(
        [*command, "--timeout", "1", "status"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == exit_status.FAILURE, done.stderr
    assert done.stderr.startswith("error: cannot reach the coordinator")
