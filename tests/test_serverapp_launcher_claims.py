"""The ServerApp launcher asks a real SuperLink for tasks often only while a run it submitted
awaits its ServerApp: each ask is an authenticated call that writes the SuperLink's
database, and asked ten times a second all the time they were a third of the SuperLink's
calls in a 4-client DPFL run (benchmarks/coordinator_cpu.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from flwr.proto.runtime_pb2 import AcquireTaskResponse

from collabfl.flower.serverapp_launcher import (
    CLAIM_POLL_S,
    IDLE_CLAIM_S,
    OWN_RUN_WAIT_S,
    ServerAppLauncher,
    SubmittedRuns,
)
from collabfl.flower.superexec_auth import ensure_secret
from tests.support.task_claims import superexec_superlink

pytestmark = pytest.mark.federation


class CountedLauncher:
    """A launcher on a real SuperLink whose answered task claims are counted."""

    def __init__(self, tmp_path: Path, address: str, secret: Path) -> None:
        self.submitted = SubmittedRuns()
        self.launcher = ServerAppLauncher(
            address, None, secret, self.submitted, tmp_path / "tokens",
            tmp_path / "serverapps.log", {},
        )  # fmt: skip
        self.answered: list[float] = []
        ask = self.launcher.client.AcquireTask

        def counted(request):  # type: ignore[no-untyped-def]
            reply = ask(request)
            self.answered.append(time.monotonic())
            return reply

        self.launcher.client.AcquireTask = counted  # type: ignore[method-assign]

    def asks_within(self, seconds: float) -> int:
        start = time.monotonic()
        time.sleep(seconds)
        return sum(1 for at in self.answered if start <= at < start + seconds)


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[CountedLauncher]:
    with superexec_superlink(tmp_path) as (superlink, address, secret):
        counted = CountedLauncher(tmp_path, address, secret)
        counted.launcher.start()
        try:
            deadline = time.monotonic() + 120
            while not counted.answered:  # the SuperLink is starting
                assert superlink.poll() is None, (tmp_path / "superlink.log").read_text()
                assert time.monotonic() < deadline, "the SuperLink never answered a claim"
                time.sleep(0.1)
            yield counted
        finally:
            counted.launcher.stop()


def test_an_idle_launcher_asks_about_once_per_idle_interval(launcher: CountedLauncher) -> None:
    window = 2 * IDLE_CLAIM_S
    asks = launcher.asks_within(window)
    assert asks <= window / IDLE_CLAIM_S + 1, f"{asks} claims in {window} s with no run awaited"


def test_an_announced_submission_is_claimed_for_at_the_fast_pace(
    launcher: CountedLauncher,
) -> None:
    launcher.submitted.expect()
    asks = launcher.asks_within(1.0)
    # At CLAIM_POLL_S on a loaded 2-core machine: well above the idle pace, whatever the load.
    assert asks >= 3, f"{asks} claims in 1 s while a submission awaits its ServerApp"
    assert CLAIM_POLL_S < IDLE_CLAIM_S


def test_a_stopping_launcher_does_not_wait_out_its_idle_interval(
    launcher: CountedLauncher,
) -> None:
    time.sleep(0.2)  # into its idle wait
    started = time.monotonic()
    launcher.launcher.stop()
    assert time.monotonic() - started < IDLE_CLAIM_S / 2


def test_a_submission_is_awaited_until_claimed_or_for_its_wait_at_most() -> None:
    now = [0.0]
    submitted = SubmittedRuns(clock=lambda: now[0])
    assert not submitted.expecting()
    submitted.expect()
    submitted.expect()
    assert submitted.expecting()
    submitted.claimed()
    assert submitted.expecting()  # the second still awaits its ServerApp
    now[0] = OWN_RUN_WAIT_S + 1
    assert not submitted.expecting()  # never claimed (its submission failed): given up
    submitted.claimed()  # nothing awaited: no error
    assert not submitted.expecting()


def test_wait_expected_returns_when_a_submission_is_announced() -> None:
    submitted, stopping = SubmittedRuns(), threading.Event()
    threading.Timer(0.1, submitted.expect).start()
    started = time.monotonic()
    submitted.wait_expected(30.0, stopping)
    assert time.monotonic() - started < 10.0


def test_a_stranger_s_run_is_refused_at_once_when_no_submission_awaits_its_id() -> None:
    submitted = SubmittedRuns()
    started = time.monotonic()
    assert not submitted.wait_for(41, timeout_s=30.0)
    assert time.monotonic() - started < 5.0  # was: the whole wait, for every claim of it
    submitted.expect()
    threading.Timer(0.2, submitted.add, args=(42,)).start()
    started = time.monotonic()
    assert not submitted.wait_for(41, timeout_s=30.0)  # known foreign once 42 is named
    assert time.monotonic() - started < 5.0
    assert submitted.wait_for(42, timeout_s=0.0)


def test_a_failed_submission_stops_being_awaited() -> None:
    submitted = SubmittedRuns()
    submitted.expect()
    submitted.abandon()
    started = time.monotonic()
    assert not submitted.wait_for(7, timeout_s=30.0)
    assert time.monotonic() - started < 5.0
    assert not submitted.expecting()


def test_a_pending_foreign_run_does_not_delay_a_relaunch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stranger's task is claimed first, every time it is offered; the coordinator's
    own relaunch still gets its ServerApp within seconds, and the stranger is reported once."""
    foreign, own = 900, 901
    submitted = SubmittedRuns()
    reported: list[int] = []
    launcher = ServerAppLauncher(
        "127.0.0.1:9", None, ensure_secret(tmp_path), submitted, tmp_path / "tokens",
        tmp_path / "serverapps.log", {}, on_foreign=reported.append,
    )  # fmt: skip
    started: list[list[str]] = []

    def fork(flags: list[str], log_path: Path, timeout_s: float) -> SimpleNamespace:
        started.append(flags)
        return SimpleNamespace(
            pid=0, poll=lambda: None, terminate=lambda: None, wait=lambda timeout=0: 0
        )

    monkeypatch.setattr(launcher.template, "fork", fork)
    monkeypatch.setattr(launcher.template, "start", lambda: None)
    offered = {"turn": 0}

    def acquire(request: object) -> AcquireTaskResponse:
        offered["turn"] += 1
        run = foreign if offered["turn"] % 2 else own  # the stranger first, then ours
        reply = AcquireTaskResponse(token=f"t{offered['turn']}")
        reply.task.task_id, reply.task.run_id = offered["turn"], run
        return reply

    launcher.client.AcquireTask = acquire  # type: ignore[method-assign]
    submitted.expect()  # the relaunch: its id arrives after the stranger's task is claimed
    threading.Timer(0.5, submitted.add, args=(own,)).start()
    begun = time.monotonic()
    launcher.start()
    try:
        while not started:
            assert time.monotonic() - begun < 20.0, "the relaunch waited on the stranger"
            time.sleep(0.05)
    finally:
        launcher.stop()
    assert time.monotonic() - begun < 20.0
    assert reported == [foreign]
