"""The ServerApp's transport signals (apps/fleet_signals.py) over a real coordinator
service: a push reaches the gateway's doorbell, a reply wakes the wait, and a coordinator
that cannot be reached costs a poll interval, never the run."""

from __future__ import annotations

import threading
from pathlib import Path

from support.coordinator import served, valid_request

from collabfl.apps.fleet_signals import REPLY_WAIT_S, CoordinatorSignals
from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.service_client import CoordinatorClient
from collabfl.coordinator.store.state import CoordinatorState


def test_signals_travel_through_the_coordinator_service(tmp_path: Path):
    activity = FleetActivity()
    with (
        CoordinatorState(tmp_path / "coordinator.db") as state,
        served(state, activity=activity) as address,
    ):
        state.create_run("r", "dpfl", valid_request())
        token = state.new_launch("r")
        with CoordinatorClient(address, timeout_s=30, launch_token=token) as client:
            signals = CoordinatorSignals(client, "r")
            signals.pushed()
            assert activity.messages.count == 1
            woke: list[int] = []
            waiter = threading.Thread(target=lambda: woke.append(signals.await_replies(0, 60)))
            waiter.start()
            activity.replies.ring()  # as the gateway does when a SuperNode pushes a reply
            waiter.join(timeout=30)
            assert not waiter.is_alive() and woke == [1]


def test_an_unreachable_coordinator_falls_back_to_polling(closed_port):
    address = f"127.0.0.1:{closed_port}"
    with CoordinatorClient(address, timeout_s=2) as client:
        signals = CoordinatorSignals(client, "r")
        signals.pushed()  # a lost signal is logged, not raised
        assert signals.await_replies(4, REPLY_WAIT_S) == 5  # look again, as polling does
