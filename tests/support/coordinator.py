"""A coordinator service on loopback for tests, and the run requests it accepts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.member_status import SupernodeList
from collabfl.coordinator.service import serve
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.run_options import RunOptions
from collabfl.kernel.tls import ServerTLS


class FakeSigner:
    """Stands in for GrantSigner: a readable token that says what it grants."""

    def issue(self, run: str, fetcher: int, owner: int, round: int, ttl_s: float) -> bytes:
        return f"{run}:{fetcher}->{owner}@{round}/{ttl_s:g}".encode()


def valid_request(method: str = "dpfl", *overrides: str, **options: Any) -> dict[str, Any]:
    """A run request CreateRun accepts: the default experiment config with ``overrides``."""
    spec = parse_method_spec(method, load_config(None, list(overrides)))
    return run_request(spec, RunOptions(**options))


@contextmanager
def served(
    state: CoordinatorState,
    tls: ServerTLS | None = None,
    runs_dir: Path | None = None,
    activity: FleetActivity | None = None,
    supernodes: SupernodeList | None = None,
) -> Iterator[str]:
    """The service over ``state`` on a free loopback port; yields its address.
    ``supernodes``: what it reads as the SuperLink's node list (default: none)."""
    server: grpc.Server
    server, port = serve(
        state,
        FakeSigner(),
        tls=tls,
        runs_dir=runs_dir,
        activity=activity,
        supernodes=supernodes,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)
