"""Failed joins from many addresses: a bounded number of events and of throttle entries.

The per-address throttle (``JoinThrottle``) once bounded only what one address could write:
each failed join from a fresh address wrote a ``join_refused`` event and a warning line, and
left an entry in the throttle's table for good. A real Enroller and state, no network."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_enrolment import Clock, FakeSuperLink

from collabfl.coordinator.enrolment.coordinator_pki import ensure_pki
from collabfl.coordinator.enrolment.enrolment import (
    Enroller,
    JoinRefused,
    JoinRequest,
    JoinThrottle,
)
from collabfl.coordinator.store.enrolment_store import EnrolmentStore
from collabfl.coordinator.store.event_ration import EventRation
from collabfl.coordinator.store.state import CoordinatorState

FORGED = JoinRequest(token="cfj1.forged", csr_pem=b"")


def _enroller(folder: Path, clock: Clock, throttle: JoinThrottle | None = None) -> Enroller:
    state = CoordinatorState(folder / "coordinator.db")
    return Enroller(
        ensure_pki(folder / "pki", ["localhost"]), EnrolmentStore(folder / "coordinator.db"),
        state, FakeSuperLink().registry(), b"grant key", "localhost:9300", "localhost:0",
        throttle=throttle, clock=clock,
    )  # fmt: skip


def _refused(enroller: Enroller, addresses: range) -> None:
    for n in addresses:
        with pytest.raises(JoinRefused):
            enroller.join(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}", FORGED)


def _events(enroller: Enroller) -> list[str]:
    return [e.message for e in enroller.state.events() if e.kind == "join_refused"]


def test_a_flood_from_many_addresses_writes_ten_events_a_minute(tmp_path, caplog):
    clock = Clock()
    enroller = _enroller(tmp_path, clock)
    try:
        with caplog.at_level(logging.WARNING, logger="collabfl.coordinator.enrolment.enrolment"):
            _refused(enroller, range(500))  # before: 500 events and 500 warnings
            assert len(_events(enroller)) == 10
            assert len(caplog.records) == 10
            clock.now += 61
            _refused(enroller, range(500, 501))
        events = _events(enroller)
        assert len(events) == 11
        assert events[-1].endswith("; 490 more failed joins since the last one recorded")
    finally:
        enroller.state.close()


def test_the_ration_is_per_interval():
    ration = EventRation(per_interval=2, interval_s=10.0)
    assert [ration.admit(t) for t in (0.0, 1.0, 2.0, 3.0)] == [0, 0, None, None]
    assert ration.admit(10.5) == 2  # the first left the window; two went unwritten
    assert ration.admit(10.6) is None


def test_the_throttle_forgets_addresses_whose_failures_left_the_window(tmp_path):
    clock = Clock()
    throttle = JoinThrottle(window_s=60.0, forget_at=100)
    enroller = _enroller(tmp_path, clock, throttle)
    try:
        _refused(enroller, range(99))
        clock.now += 61
        _refused(enroller, range(1000, 1001))  # before: the table kept all 100 for good
        assert len(throttle._failures) == 1
        _refused(enroller, range(2000, 2300))  # all recent: kept, swept when it doubles
        assert len(throttle._failures) == 301
    finally:
        enroller.state.close()
