"""The Fleet gateway holds a SuperNode's call while its SuperLink is not listening yet.

A federation starts its clients beside the coordinator; a SuperNode whose first call is
refused backs off for seconds, so the gateway asks the SuperLink again until it listens (up
to a bound), and only then answers. The health check is not held: it says how the SuperLink
is now. In-process, with a stand-in for the gateway's HTTP client to the SuperLink.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.requests import Request

from collabfl.coordinator.gateway.fleet_gateway import (
    ACTIVATE_PATH,
    HEALTH_PATH,
    PULL_PATH,
    FleetOnlyProxy,
)


class StartingSuperLink:
    """Refuses the first ``refusals`` connections, then answers 200."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    async def request(self, method: str, path: str, **_: object) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.refusals:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, content=b"ok", headers={"content-type": "text/plain"})


def _request(method: str, path: str) -> Request:
    scope = {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    return Request(scope, receive)


def _forward(superlink: StartingSuperLink, method: str, path: str, start_wait_s: float) -> int:
    proxy = FleetOnlyProxy("http://127.0.0.1:9", False, start_wait_s=start_wait_s)
    proxy.client = superlink  # type: ignore[assignment]
    return asyncio.run(proxy._forward(_request(method, path))).status_code


def test_a_fleet_call_waits_for_a_superlink_that_is_starting():
    superlink = StartingSuperLink(refusals=3)
    assert _forward(superlink, "POST", "/v1/fleet/create-node", start_wait_s=30.0) == 200
    assert superlink.calls == 4


def test_a_superlink_that_never_listens_is_reported_when_the_wait_ends():
    superlink = StartingSuperLink(refusals=10**9)
    assert _forward(superlink, "POST", PULL_PATH, start_wait_s=0.2) == 503
    assert superlink.calls > 1


@pytest.mark.parametrize("start_wait_s", [0.0, 30.0])
def test_the_health_check_is_answered_at_once(start_wait_s):
    superlink = StartingSuperLink(refusals=1)
    assert _forward(superlink, "GET", HEALTH_PATH, start_wait_s) == 503
    assert superlink.calls == 1


class KeysComing:
    """Says the keys are back once it has been asked ``until`` times."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked > self.until


def _activate(keys: KeysComing, start_wait_s: float) -> StartingSuperLink:
    superlink = StartingSuperLink(refusals=0)
    proxy = FleetOnlyProxy("http://127.0.0.1:9", False, start_wait_s=start_wait_s, keys_ready=keys)
    proxy.client = superlink  # type: ignore[assignment]
    assert asyncio.run(proxy._forward(_request("POST", ACTIVATE_PATH))).status_code == 200
    return superlink


def test_an_activation_waits_while_the_keys_are_registered_again():
    """A restarted SuperLink would refuse a SuperNode whose key is not back yet (412) and
    the SuperNode would back off; the gateway holds its activation until the keys are back."""
    keys = KeysComing(until=3)
    superlink = _activate(keys, start_wait_s=30.0)
    assert keys.asked == 4 and superlink.calls == 1


def test_an_activation_goes_on_when_the_hold_ends():
    keys = KeysComing(until=10**9)
    superlink = _activate(keys, start_wait_s=0.2)
    assert keys.asked > 1 and superlink.calls == 1
