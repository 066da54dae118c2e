"""A container health probe that starts in milliseconds: standard library only.

    python probe.py http://127.0.0.1:9093/health tcp://127.0.0.1:9300

Each target must answer within ``--timeout`` seconds: an ``http://`` URL with status 200, a
``tcp://HOST:PORT`` by accepting a connection. Exit 0 when all do, else 1 with one line per
failure on stderr (docker keeps the probe's last output in ``docker inspect``). Importing
collabfl here would cost seconds of CPU on every probe, for no better answer.
"""

from __future__ import annotations

import argparse
import socket
import sys
import urllib.request
from urllib.parse import urlsplit


def check(target: str, timeout_s: float) -> str | None:
    """None when ``target`` answers, else why not."""
    parts = urlsplit(target)
    try:
        if parts.scheme == "http":
            with urllib.request.urlopen(target, timeout=timeout_s) as response:
                return None if response.status == 200 else f"HTTP {response.status}"
        if parts.scheme == "tcp" and parts.hostname and parts.port:
            with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s):
                return None
    except OSError as error:
        return str(error)
    return "not an http:// URL or tcp://HOST:PORT"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="+", metavar="TARGET")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per target")
    args = parser.parse_args(argv)
    failures = [
        f"{target}: {reason}"
        for target in args.targets
        if (reason := check(target, args.timeout)) is not None
    ]
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
