"""What anonymous large POSTs cost the Fleet gateway's process in memory.

Starts the gateway (default limits, no TLS) in a process of its own, in front of an
upstream that answers every call at once, then sends ``--posts`` anonymous POSTs of
``--body-mib`` each to ``/v1/fleet/push-messages`` at the same time, as a stranger with no
certificate or node key could. Prints the gateway process's resident memory before, at its
peak (VmHWM) and after, and the answers' status codes.

    python benchmarks/fleet_gateway_memory.py [--posts 10] [--body-mib 50]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import write_results

PATH = "/v1/fleet/push-messages"


def serve(port_file: Path) -> None:
    """The gateway's process: an upstream and the gateway, until killed."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from collabfl.coordinator.gateway.fleet_gateway import FleetGateway

    async def answer(request):
        return Response(b"", media_type="application/protobuf")

    upstream_app = Starlette(routes=[Route(PATH, answer, methods=["POST"])])
    upstream = uvicorn.Server(uvicorn.Config(upstream_app, port=0, log_level="warning"))
    threading.Thread(target=upstream.run, daemon=True).start()
    while not upstream.started:
        time.sleep(0.01)
    upstream_port = upstream.servers[0].sockets[0].getsockname()[1]
    gateway = FleetGateway("127.0.0.1", 0, f"http://127.0.0.1:{upstream_port}", None, None)
    port_file.write_text(str(gateway.start()))
    threading.Event().wait()


def memory(pid: int) -> dict[str, float]:
    """Resident and peak resident MiB of process ``pid``."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def post(port: int, size: int) -> int:
    """One anonymous POST of ``size`` bytes; the answer's status (0: none came)."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=120)
    head = f"POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: {size}\r\n\r\n".encode()
    piece = bytes(1 << 20)

    def send() -> None:
        try:
            connection.sendall(head)
            for _ in range(size >> 20):
                connection.sendall(piece)
        except OSError:
            pass  # refused: the gateway closed the connection

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    try:
        while b"\r\n" not in answer and (data := connection.recv(4096)):
            answer += data
    except OSError:
        pass
    finally:
        sender.join(timeout=120)
        connection.close()
    return int(answer.split()[1]) if answer else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--posts", type=int, default=10)
    p.add_argument("--body-mib", type=int, default=50)
    p.add_argument("--name", default="fleet_gateway_memory", help="results file name")
    p.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve)
        return
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        child = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.05)
            port = int(port_file.read_text())
            time.sleep(1.0)  # settled
            before = memory(child.pid)
            with ThreadPoolExecutor(args.posts) as pool:
                sizes = [args.body_mib << 20] * args.posts
                statuses = Counter(pool.map(lambda size: post(port, size), sizes))
            time.sleep(1.0)
            after = memory(child.pid)
        finally:
            child.kill()
            child.wait()
    figures = {
        "rss_before_mib": round(before["VmRSS"], 1),
        "rss_peak_mib": round(after["VmHWM"], 1),
        "rss_after_mib": round(after["VmRSS"], 1),
        "statuses": dict(statuses),
    }
    print(
        f"{args.posts} anonymous POSTs of {args.body_mib} MiB: gateway RSS "
        f"{figures['rss_before_mib']} MiB before, peak {figures['rss_peak_mib']} MiB, "
        f"{figures['rss_after_mib']} MiB after; answers {dict(statuses)}"
    )
    write_results(args.name, figures, {"posts": args.posts, "body_mib": args.body_mib})


if __name__ == "__main__":
    main()
