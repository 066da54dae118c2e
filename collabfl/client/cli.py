"""``collabfl-client``: the participant's one command. ``collabfl-client join ...`` enrols
this machine (client/join.py, which then starts the daemon); anything else starts the daemon
(client/daemon.py)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["join"]:  # each imports only what it needs: a join, not the daemon's
        from collabfl.client import join

        return join.main(argv[1:])
    from collabfl.client import daemon

    return daemon.main(argv)
