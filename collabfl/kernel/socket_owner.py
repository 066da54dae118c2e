"""Which local user opened the other end of a TCP connection on this machine (Linux).

A loopback TCP port takes connections from every local user and tells a server nothing about
who called (no SO_PEERCRED, as a Unix socket has). The kernel's socket tables do: each line
of ``/proc/net/tcp`` and ``/proc/net/tcp6`` names a socket's local and remote address and
the uid that created it. The calling socket is the one whose local address is the server's
peer and whose remote address is the server's own; only it and the server's accepted socket
carry that address pair, in opposite order. A socket in TIME_WAIT has no owner any more (the
kernel shows uid 0) and is never taken for the caller.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TIME_WAIT = "06"
_STATE, _UID = 2, 6
"""Where a line's state and uid are, counted from its local address."""


def owner_lookup_available() -> bool:
    """Whether this machine lists its TCP sockets with their owners (Linux's procfs)."""
    return TABLES[0].is_file()


def connection_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid that owns the socket at ``peer`` connected to this machine's ``local``
    address; None when no table lists it (gone already, or not on this machine)."""
    for table, hexed in ((TABLES[0], _hex_v4), (TABLES[1], _hex_v6)):
        try:
            wanted = f"{hexed(peer)} {hexed(local)} "
        except ValueError:
            continue  # an address of the other family
        try:
            text = table.read_text()
        except OSError:
            continue
        start = text.find(wanted)
        while start >= 0:
            fields = text[start : text.find("\n", start)].split()
            if fields[_STATE] != TIME_WAIT:
                return int(fields[_UID])
            start = text.find(wanted, start + 1)
    return None


def _hex_v4(address: tuple[str, int]) -> str:
    """``address`` as /proc/net/tcp writes it: the IPv4 address as a native-order word."""
    host, port = address[0], address[1]
    packed = ipaddress.IPv4Address(_unmapped(host)).packed
    return f"{struct.unpack('=I', packed)[0]:08X}:{port:04X}"


def _hex_v6(address: tuple[str, int]) -> str:
    """``address`` as /proc/net/tcp6 writes it: four native-order words (an IPv4 address
    of a dual-stack socket in its IPv4-mapped form)."""
    host, port = address[0], address[1]
    ip = ipaddress.ip_address(host.split("%")[0])
    if isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(f"::ffff:{ip}")
    words = struct.unpack("=4I", socket.inet_pton(socket.AF_INET6, str(ip)))
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


def _unmapped(host: str) -> str:
    """An IPv4 address, also from its IPv4-mapped IPv6 form; ValueError for any other."""
    ip = ipaddress.ip_address(host.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is None:
            raise ValueError(f"{host} is not an IPv4 address")
        return str(ip.ipv4_mapped)
    return str(ip)
