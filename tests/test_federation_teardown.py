"""Tearing a federation down ends every process it started, however often its daemons were
restarted: also what a daemon's Flower child started in a session of its own (SuperExec's
``flwr-serverapp``), which outlived its daemon's process group after a SuperLink restart or a
``flwr stop`` and relaunch. The coordinator here is a stand-in that starts such a process,
as the real one's children do, carrying its owner variable (kernel/leftovers.py)."""

from __future__ import annotations

import sys
import time

import pytest
from federation_faults import federation_processes

from collabfl.launcher.federation import LocalFederation

pytestmark = pytest.mark.federation

STAND_IN = """
import os, subprocess, sys, time
from pathlib import Path
from collabfl.kernel.leftovers import owner_env
env = {**os.environ, **owner_env(Path(sys.argv[1]))}
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env,
                 start_new_session=True)
print("started its own-session child", flush=True)
time.sleep(300)
"""


def test_teardown_ends_what_restarted_daemons_started_in_sessions_of_their_own(tmp_path):
    federation = LocalFederation(tmp_path / "work", [tmp_path / "client-0.npz"])
    federation.coordinator_dir.mkdir(parents=True)
    command = [sys.executable, "-c", STAND_IN, str(federation.coordinator_dir)]
    try:
        for start in range(1, 4):
            if start > 1:
                federation.kill("coordinator")
                federation.restart("coordinator")
            else:
                federation._spawn("coordinator", command)
            deadline = time.monotonic() + 60
            log = federation.log_path("coordinator")
            while log.read_text().count("started its own-session child") < start:
                assert time.monotonic() < deadline, "the stand-in did not start its child"
                time.sleep(0.05)
        assert len(federation_processes(federation.work_dir)) >= 4  # 3 children, 1 daemon
    finally:
        federation.stop()
    left = federation_processes(federation.work_dir)
    assert not left, f"still running after teardown: {left}"
