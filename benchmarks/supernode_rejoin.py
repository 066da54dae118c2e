"""Time from SIGKILL of a client daemon's SuperNode to its rejoin (issue #25).

A TLS coordinator daemon (SuperNode auth on, behind its Fleet gateway) and one client
daemon with a registered SuperNode key run on loopback; the SuperNode is killed with
SIGKILL ``--trials`` times, each after 65 s of running (so that the supervisor counts it
healthy again), and the time until its supervised restart logs a new "SuperNode ID" line
is printed, with the median.

    python benchmarks/supernode_rejoin.py [--trials 3] [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

from collabfl.flower.supernode_key import ensure_supernode_key
from tests.support.tls_federation import ClientDaemon, TlsCoordinator

HEALTHY_WAIT_S = 65.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--work-dir", type=Path)
    args = p.parse_args()
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="rejoin-"))
    coordinator = TlsCoordinator(root)
    client = None
    try:
        coordinator.wait_healthy()
        _, public_key = ensure_supernode_key(coordinator.client_state(0))
        coordinator.register(0, public_key)
        client = coordinator.client(0)
        _wait_joins(client, 1)
        times = []
        for trial in range(args.trials):
            time.sleep(HEALTHY_WAIT_S)
            joined = client.joins()
            pid = int((coordinator.client_state(0) / "supernode.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            _wait_joins(client, joined + 1)
            times.append(time.monotonic() - killed)
            print(f"trial {trial}: rejoined {times[-1]:.1f} s after SIGKILL", flush=True)
        print(f"median {statistics.median(times):.1f} s of {[round(t, 1) for t in times]}")
    finally:
        if client is not None:
            client.stop()
        coordinator.stop()


def _wait_joins(client: ClientDaemon, count: int, limit_s: float = 300.0) -> None:
    deadline = time.monotonic() + limit_s
    while client.joins() < count:
        if client.process.poll() is not None:
            raise RuntimeError(f"the client daemon exited; see {client.log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no join within {limit_s:.0f} s; see {client.log_path}")
        time.sleep(0.1)


if __name__ == "__main__":
    main()
