"""What a SIGKILLed SuperNode costs a running round (issue #32, 3).

A 3-client TLS federation on loopback runs DPFL with a long message deadline
(``--message-timeout``); once the run is past round 0, client 2's SuperNode is SIGKILLed
while it holds a round's message (its daemon restarts it), ``--trials`` times, each once
the client has taken part again.
Printed per trial: how long the round in flight took after the kill (``stall``), and how
long after the restarted SuperNode's start it joined and took part in a round again.

    python benchmarks/supernode_kill_round.py [--trials 3] [--message-timeout 300]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from federation_faults import fault_config, rounds_of, start_run, wait_for, wait_holding

from collabfl.launcher.federation import LocalFederation, write_client_files

CLIENTS, KILLED = 3, 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--message-timeout", type=float, default=300.0)
    p.add_argument("--work-dir", type=Path)
    args = p.parse_args()
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="kill-round-"))
    config = fault_config(root, CLIENTS, 1000)
    files = write_client_files(config, root / "data")
    stalls, joins, takes = [], [], []
    with LocalFederation(root / "work", files, tls=True) as federation:
        out = root / "run"
        run_id = start_run(federation, config, out, timeout=args.message_timeout)
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        pid_file = federation.client_dir(KILLED) / "supernode.pid"
        log = federation.client_dir(KILLED) / "supernode.log"
        for trial in range(args.trials):
            old = int(pid_file.read_text())
            joined_before = log.read_bytes().count(b"SuperNode ID:")
            wait_holding(log)
            os.kill(old, signal.SIGKILL)
            killed = time.monotonic()
            in_flight = (wait_for(federation, run_id, lambda r: True).last_completed_round or 0) + 1
            restarted = _restarted(pid_file, old)
            wait_for(federation, run_id, partial(_past, in_flight))
            stalls.append(time.monotonic() - killed)
            while log.read_bytes().count(b"SuperNode ID:") <= joined_before:
                time.sleep(0.05)
            joins.append(time.monotonic() - restarted)
            while not any(KILLED in who for t, who in rounds_of(out).items() if t > in_flight):
                time.sleep(0.2)
            takes.append(time.monotonic() - restarted)
            print(
                f"trial {trial}: round in flight done {stalls[-1]:.1f} s after SIGKILL; "
                f"restarted {restarted - killed:.1f} s after it, joined {joins[-1]:.1f} s "
                f"and took part {takes[-1]:.1f} s after its restart",
                flush=True,
            )
        with federation.client() as client:
            client.stop_run(run_id)
    for name, values in (("stall", stalls), ("join", joins), ("take part", takes)):
        rounded = [round(v, 1) for v in values]
        print(f"{name}: median {statistics.median(values):.1f} s of {rounded}")


def _restarted(pid_file: Path, old: int) -> float:
    """When the daemon wrote its restarted SuperNode's pid (monotonic seconds)."""
    while int(pid_file.read_text() or old) == old:
        time.sleep(0.02)
    return time.monotonic()


def _past(round_index: int, run) -> bool:
    return (run.last_completed_round or -1) >= round_index


if __name__ == "__main__":
    main()
