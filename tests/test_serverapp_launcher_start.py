"""The ServerApp launcher starts beside its SuperLink and must ask it for tasks as soon as it
listens: with Flower's retry back-off its first answered claim came 14.9 s after the
daemon's start, 9 s after the SuperLink listened, and a run submitted meanwhile waited
for it (benchmarks/federation_round.py's launch phases)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from collabfl.flower.serverapp_launcher import ServerAppLauncher, SubmittedRuns
from collabfl.flower.superexec_auth import ensure_secret

LATE_S = 1.5
"""When the stand-in SuperLink starts listening (Flower's back-off: tries at 0, 0.4, 1.2,
3.7 s)."""


def test_first_claim_follows_a_late_superlink_within_a_fraction_of_a_second(
    tmp_path: Path, reserve_ports: Callable[[int], list[int]]
) -> None:
    (port,) = reserve_ports(1)  # refused until the stand-in listens on it
    asked: list[float] = []

    class Refusing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(time.monotonic())
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    launcher = ServerAppLauncher(
        f"127.0.0.1:{port}", None, ensure_secret(tmp_path), SubmittedRuns(),
        tmp_path / "tokens", tmp_path / "serverapps.log", {},
    )  # fmt: skip
    launcher.start()
    try:
        time.sleep(LATE_S)
        server = ThreadingHTTPServer(("127.0.0.1", port), Refusing)
        listening = time.monotonic()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            deadline = listening + 5.0
            while not asked and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            server.shutdown()
            server.server_close()
    finally:
        launcher.stop()
    assert asked, "the launcher never asked the SuperLink once it listened"
    assert asked[0] - listening < 0.5
