"""A container health probe that starts in milliseconds: standard library only.

    python probe.py https://127.0.0.1:9093/health tcp://127.0.0.1:9300

Each target must answer within ``--timeout`` seconds: an ``http://`` or ``https://`` URL
with status 200, a ``tcp://HOST:PORT`` by accepting a connection. ``https://`` does not
verify the certificate: the probe asks whether the daemon in its own container answers, not
who it is (the coordinator makes its certificate on first start; no secret is sent). Exit 0
when all do, else 1 with one line per failure on stderr (docker keeps the probe's last
output in ``docker inspect``). Importing collabfl here would cost seconds of CPU on every
probe, for no better answer.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import sys
import urllib.request
from urllib.parse import urlsplit


def _unverified() -> ssl.SSLContext:
    """TLS without certificate checks: liveness, not identity (see above)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


_UNVERIFIED = _unverified()


def check(target: str, timeout_s: float) -> str | None:
    """None when ``target`` answers, else why not."""
    parts = urlsplit(target)
    try:
        if parts.scheme in ("http", "https"):
            with urllib.request.urlopen(target, timeout=timeout_s, context=_UNVERIFIED) as response:
                return None if response.status == 200 else f"HTTP {response.status}"
        if parts.scheme == "tcp" and parts.hostname and parts.port:
            with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s):
                return None
    except OSError as error:
        return str(error)
    return "not an http:// or https:// URL, or tcp://HOST:PORT"


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
