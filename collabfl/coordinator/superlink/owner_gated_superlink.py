"""``flower-superlink``, answering on its loopback port only the processes of its own user.

Flower 1.41 and 1.42 serve the SuperLink's Control API (list, submit and stop runs; register
SuperNode keys), its Runtime API and its Fleet API on one HTTP port with no caller
authentication in the open-source edition: ``--control-api-address`` is deprecated and
ignored, it and ``--host`` take no ``unix:`` socket (Flower exits with "cannot be parsed",
uvicorn with "Name or service not known"), and the only Control API authentication is the
enterprise OIDC plugin. On loopback that let any local user list and stop the coordinator's
runs.

So the coordinator starts the SuperLink through this module: Flower's own
``flower-superlink`` entry point, in a process where uvicorn's HTTP protocol first asks the
kernel which user opened each accepted connection (kernel/socket_owner.py) and answers
anyone but this process's user with 403 and a closed connection, before reading a byte of
the request. Every caller inside collabfl (the Fleet gateway, the Control API client, the
ServerApp launcher and its ``flwr-serverapp`` processes, ``flwr`` commands) runs as the
coordinator's user and passes. The hook is uvicorn's ``Config.load``, which every uvicorn
server runs before it listens, so it holds however Flower starts uvicorn; the contract test
(tests/test_superlink_owner_gate.py) fails if either side changes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import cast

from uvicorn.config import Config

from collabfl.flower.processes import flower_entry_point
from collabfl.kernel.socket_owner import connection_owner

log = logging.getLogger("uvicorn.error")

FLOWER_ENTRY_POINT = "flower-superlink"
LOG_EVERY_S = 60.0
"""One log line per refused user this often at most: any local user can knock."""


def refusal(owner: int) -> bytes:
    """The whole answer a caller of another user gets."""
    body = f"this SuperLink answers only the processes of its own user (uid {owner})\n".encode()
    head = (
        "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def owner_gated(protocol: type[asyncio.Protocol], owner: int) -> type[asyncio.Protocol]:
    """``protocol`` (one of uvicorn's HTTP protocols) refusing every connection whose
    calling socket is not ``owner``'s, or whose owner cannot be found."""
    logged: dict[int | None, float] = {}

    class OwnerGated(protocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            local = transport.get_extra_info("sockname")
            caller = None
            if isinstance(peer, tuple) and isinstance(local, tuple):
                caller = connection_owner(peer[:2], local[:2])
            if caller == owner:
                return
            now = time.monotonic()
            if now - logged.get(caller, -LOG_EVERY_S) >= LOG_EVERY_S:
                logged[caller] = now
                log.warning(
                    "refused a connection from %s: its socket belongs to uid %s; only uid %s "
                    "may use this SuperLink (one line per user a minute)",
                    peer, "unknown" if caller is None else caller, owner,
                )  # fmt: skip
            writable = cast(asyncio.Transport, transport)  # uvloop's are no asyncio subclass
            writable.write(refusal(owner))
            writable.close()

    OwnerGated.__name__ = f"OwnerGated{protocol.__name__}"
    return OwnerGated


def install_owner_gate(owner: int) -> None:
    """Make every uvicorn server of this process gate its connections on ``owner``."""
    load = Config.load

    def gated_load(config: Config) -> None:
        load(config)
        config.http_protocol_class = owner_gated(config.http_protocol_class, owner)

    setattr(Config, "load", gated_load)  # noqa: B010 (mypy refuses assigning a method)


def main() -> None:
    """Run ``flower-superlink`` with this process's arguments, gated on its user."""
    install_owner_gate(os.geteuid())
    sys.argv[0] = FLOWER_ENTRY_POINT
    flower_entry_point(FLOWER_ENTRY_POINT)()


if __name__ == "__main__":
    main()
