"""Reaping what a killed daemon left behind: only its own state dir's, only once it is dead.

Each "daemon" here is a real process that starts, with the owner variable, a group leader
which starts a member of its group; then the daemon and the leader are killed, as a SIGKILL
and a parent-death signal would, and the member is left running, reparented.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from collabfl.kernel.leftovers import Owner, reap_leftovers, start_ticks

DAEMON = """
import os, subprocess, sys
from pathlib import Path
from collabfl.kernel.leftovers import owner_env
leader = subprocess.Popen(
    [sys.executable, "-c", sys.argv[2]],
    env={**os.environ, **owner_env(Path(sys.argv[1]))},
    stdout=subprocess.PIPE, start_new_session=True, text=True,
)
print(leader.pid, leader.stdout.readline().strip(), flush=True)
sys.stdin.read()  # until the test closes stdin or kills it
"""
LEADER = """
import subprocess, sys
member = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(member.pid, flush=True)
member.wait()
"""


@dataclass
class Daemon:
    process: subprocess.Popen[str]
    leader: int
    member: int

    def crash(self) -> None:
        """The daemon SIGKILLed, its direct child gone with it; the member stays."""
        self.process.kill()
        self.process.wait(timeout=30)
        os.kill(self.leader, signal.SIGKILL)
        _wait(lambda: start_ticks(self.leader) is None, "the leader's death")


def _wait(condition, what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit_s} s"
        time.sleep(0.05)


@pytest.fixture
def start_daemon():
    started: list[Daemon] = []

    def start(state_dir: Path) -> Daemon:
        process = subprocess.Popen(
            [sys.executable, "-c", DAEMON, str(state_dir), LEADER],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        leader, member = map(int, process.stdout.readline().split())
        started.append(Daemon(process, leader, member))
        return started[-1]

    yield start
    for daemon in started:  # only what this test started, and still running
        for pid in (daemon.member, daemon.leader):
            if start_ticks(pid) is not None:
                os.kill(pid, signal.SIGKILL)
        daemon.process.kill()
        daemon.process.wait(timeout=30)


def test_a_dead_daemons_leftover_is_killed_and_no_one_elses(tmp_path, start_daemon):
    mine, other = tmp_path / "mine", tmp_path / "other"
    crashed = start_daemon(mine)
    foreign = start_daemon(other)
    running = start_daemon(mine)  # a live daemon on the same state dir: not a leftover
    crashed.crash()
    foreign.crash()
    assert start_ticks(crashed.member) is not None

    assert reap_leftovers(tmp_path / "." / "mine") == [crashed.member]
    assert start_ticks(crashed.member) is None
    assert start_ticks(foreign.member) is not None
    assert start_ticks(running.member) is not None and start_ticks(running.leader) is not None


def test_a_reused_daemon_pid_does_not_keep_a_leftover_alive():
    me = os.getpid()
    started = start_ticks(me)
    assert started is not None
    assert Owner(me, started, "/x").running
    assert not Owner(me, started - 1, "/x").running  # same pid, another process


@pytest.mark.parametrize("text", ["", "12", "12:34", "a:34:/x", "12:b:/x", "12:34:"])
def test_a_malformed_owner_names_no_one(text):
    assert Owner.decode(text) is None


def test_the_owner_round_trips_with_colons_in_the_state_dir():
    owner = Owner(12, 34, "/srv/a:b")
    assert Owner.decode(owner.encode()) == owner
