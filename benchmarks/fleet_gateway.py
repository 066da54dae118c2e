"""What the coordinator's Fleet gateway adds to each SuperNode call.

Starts a real SuperLink on loopback (TLS, as the coordinator daemon runs it) and the Fleet
gateway in front of it (TLS with a test CA), then times the same Fleet calls sent directly
to the SuperLink and through the gateway, over keep-alive connections as a SuperNode
sends them: a small call (an empty pull) and calls carrying a message-sized body. The
difference per call, times the calls of a round, is the gateway's cost per round.

    python benchmarks/fleet_gateway.py [--calls 200] [--body-mib 1,8]
"""

from __future__ import annotations

import argparse
import os
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from _common import format_table, median, write_results

from collabfl.coordinator.gateway.fleet_gateway import FleetGateway, GatewayTLS, LoopbackTLS
from collabfl.flower.processes import flower_binary, flower_env
from collabfl.kernel.ports import PortReservation
from collabfl.kernel.supervisor import stop_group
from tests.support.pki import TestCA

CALL = "/v1/fleet/pull-messages"


def timed_calls(base_url: str, ca: Path, body: bytes, calls: int) -> list[float]:
    """Seconds per call of ``calls`` POSTs of ``body`` over one keep-alive connection."""
    times = []
    with httpx.Client(base_url=base_url, verify=ssl.create_default_context(cafile=str(ca))) as c:
        c.post(CALL, content=body)  # connection set-up is not per call
        for _ in range(calls):
            start = time.perf_counter()
            c.post(CALL, content=body, headers={"content-type": "application/protobuf"})
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--body-mib", default="1,8", help="comma-separated body sizes (MiB)")
    args = p.parse_args()
    sizes = [0.0, *(float(s) for s in args.body_mib.split(","))]
    with tempfile.TemporaryDirectory() as tmp, PortReservation(2) as reserved:
        root = Path(tmp)
        loopback = LoopbackTLS.ensure(root / "loopback")
        ca = TestCA()
        public_ca = ca.write_ca(root)
        cert, key = ca.coordinator().write(root, "coordinator")
        internal, public = reserved.ports
        command = [
            flower_binary("flower-superlink"), "--host", "127.0.0.1",
            "--port", str(internal), "--ssl-ca-certfile", str(loopback.ca),
            "--ssl-certfile", str(loopback.cert), "--ssl-keyfile", str(loopback.key),
            "--disable-runtime-dependency-installation",
        ]  # fmt: skip
        superlink = subprocess.Popen(
            command,
            env={**os.environ, **flower_env(root / "flwr")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        gateway = FleetGateway(
            "127.0.0.1",
            public,
            f"https://127.0.0.1:{internal}",
            loopback.ca,
            GatewayTLS(cert, key),
        )
        gateway.start()
        try:
            direct_url, gateway_url = f"https://127.0.0.1:{internal}", f"https://127.0.0.1:{public}"
            deadline = time.monotonic() + 60
            while httpx.get(f"{gateway_url}/health", verify=str(public_ca)).status_code != 200:
                if time.monotonic() > deadline:
                    raise TimeoutError("the SuperLink did not get healthy")
                time.sleep(0.5)
            figures, rows = {}, []
            for mib in sizes:
                body = b"\0" * int(mib * 2**20)
                calls = args.calls if mib == 0 else max(args.calls // 10, 10)
                direct = median(timed_calls(direct_url, loopback.ca, body, calls))
                proxied = median(timed_calls(gateway_url, public_ca, body, calls))
                figures[f"{mib:g}MiB"] = {"direct_ms": direct * 1e3, "gateway_ms": proxied * 1e3}
                rows.append(
                    (f"{mib:g}", f"{direct * 1e3:.2f}", f"{proxied * 1e3:.2f}",
                     f"{(proxied - direct) * 1e3:+.2f}")
                )  # fmt: skip
        finally:
            gateway.stop()
            stop_group(superlink, grace_s=5.0)
    print(format_table(("body MiB", "direct ms", "gateway ms", "added ms"), rows))
    print(write_results("fleet_gateway", figures, {"calls": args.calls, "sizes_mib": sizes}))


if __name__ == "__main__":
    main()
