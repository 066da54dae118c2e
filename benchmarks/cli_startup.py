"""How long the operator's commands take to start: ``collabfl --help``, ``--version``,
``admin --help`` and ``admin status`` against a live coordinator service on loopback.

    python benchmarks/cli_startup.py --repeats 7
    python benchmarks/cli_startup.py --source /path/to/other/checkout --name cli_startup_before

Each command runs as a fresh process (``collabfl`` as its console script would start it)
from the checkout given by ``--source`` (default: this one), so two checkouts compare
before and after. Prints the median wall time per command and writes
``results/<name>.json``. Figures depend on the machine's load: run it idle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO_ROOT, format_table, median, write_results

from collabfl.coordinator.service import serve
from collabfl.coordinator.store.state import CoordinatorState

ENTRY = "import sys; sys.argv[0] = 'collabfl'; from collabfl.cli.main import main; main()"


class NoGrants:
    def issue(self, run: str, fetcher: int, owner: int, round: int, ttl_s: float) -> bytes:
        raise RuntimeError("the benchmark issues no grants")


def commands(address: str) -> dict[str, list[str]]:
    return {
        "collabfl --help": ["--help"],
        "collabfl --version": ["--version"],
        "collabfl admin --help": ["admin", "--help"],
        "collabfl admin status": ["admin", "--coordinator", address, "status"],
    }


def time_command(args: list[str], source: Path, repeats: int) -> tuple[list[float], int]:
    """Wall seconds of ``repeats`` fresh runs (after one untimed run warms the file cache) and
    the exit status (an older checkout may lack a command: it is timed all the same)."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    seconds, status = [], 0
    for attempt in range(repeats + 1):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", ENTRY, *args], cwd=source, env=env, capture_output=True
        )
        if attempt:
            seconds.append(time.perf_counter() - start)
        status = done.returncode
    return seconds, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--source", type=Path, default=REPO_ROOT, help="checkout to time")
    parser.add_argument("--name", default="cli_startup", help="results/<name>.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, CoordinatorState(Path(folder) / "db") as state:
        server, port = serve(state, NoGrants())
        try:
            timings = {
                label: time_command(command, args.source.resolve(), args.repeats)
                for label, command in commands(f"127.0.0.1:{port}").items()
            }
        finally:
            server.stop(None)
    rows = [
        (label, f"{median(s):.3f}", f"{min(s):.3f}", str(status))
        for label, (s, status) in timings.items()
    ]
    print(format_table(["command", "median s", "min s", "exit"], rows))
    figures = {
        label: {"median_s": median(s), "min_s": min(s), "runs_s": s, "exit_status": status}
        for label, (s, status) in timings.items()
    }
    settings = {"repeats": args.repeats, "source": str(args.source)}
    print(f"wrote {write_results(args.name, figures, settings)}")


if __name__ == "__main__":
    main()
