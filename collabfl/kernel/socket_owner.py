"""Which local user opened the other end of a TCP connection on this machine (Linux).

A loopback TCP port takes connections from every local user and tells a server nothing about
who called (no SO_PEERCRED, as a Unix socket has). The kernel knows: every TCP socket carries
the uid that created it. The calling socket is the one whose local address is the server's
peer and whose remote address is the server's own; only it and the server's accepted socket
carry that address pair, in opposite order. A socket in TIME_WAIT has no owner any more (the
kernel shows uid 0) and is never taken for the caller.

The kernel is asked through sock_diag (a netlink socket, as ``ss`` asks), for that one
socket by its addresses: a hash lookup, about 20 µs. Reading ``/proc/net/tcp`` instead makes
the kernel walk its whole connection table: 4 ms a table on an idle machine, 10 to 27 ms with
a 32-client federation's sockets, on the SuperLink's event loop for every connection it
accepted. The tables stay as the fallback where sock_diag is refused (a kernel without its
inet_diag module).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TIME_WAIT = "06"
_STATE, _UID = 2, 6
"""Where a line's state and uid are, counted from its local address."""

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
TCP_TIME_WAIT = 6
ALL_STATES = NO_COOKIE = 0xFFFFFFFF
SEQUENCE = 1
"""Each lookup's one request, on a netlink socket of its own."""
_HEADER = struct.Struct("=IHHII")
"""nlmsghdr: length, type, flags, sequence, port."""
_REQUEST = struct.Struct("=BBBBI")
"""inet_diag_req_v2 before its socket id: family, protocol, extensions, pad, states."""
_SOCKET_ID = struct.Struct("!HH16s16s")
"""inet_diag_sockid's ports and addresses (network order); its interface and cookie follow."""
_ANSWER = struct.Struct("=BBBB48sIIIII")
"""inet_diag_msg: family, state, timer, retransmits, socket id, expires, queues, uid, inode."""
_NOT_THERE = -errno.ENOENT


def owner_lookup_available() -> bool:
    """Whether this machine lists its TCP sockets with their owners (Linux's procfs)."""
    return TABLES[0].is_file()


def connection_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid that owns the socket at ``peer`` connected to this machine's ``local``
    address; None when the kernel has no such socket (gone already, or not on this
    machine)."""
    try:
        return diag_owner(peer, local)
    except OSError:
        return table_owner(peer, local)


def diag_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """``connection_owner`` asked through sock_diag; OSError where the kernel refuses it."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as link:
        link.settimeout(1.0)
        for family, packed in ((socket.AF_INET, _packed_v4), (socket.AF_INET6, _packed_v6)):
            try:
                wanted = _SOCKET_ID.pack(peer[1], local[1], packed(peer[0]), packed(local[0]))
            except ValueError:
                continue  # an address of the other family
            owner = _ask(link, family, wanted)
            if owner is not None:
                return owner
    return None


def _ask(link: socket.socket, family: int, wanted: bytes) -> int | None:
    """The uid of the one ``family`` TCP socket with the ports and addresses ``wanted``."""
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, ALL_STATES)
    body += wanted + struct.pack("=III", 0, NO_COOKIE, NO_COOKIE)
    header = _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, SEQUENCE, 0)
    link.sendto(header + body, (0, 0))  # to the kernel
    reply, (sender, _) = link.recvfrom(8192)
    if sender != 0:
        raise OSError(f"sock_diag: a reply from port {sender}, not the kernel")
    return _answer(reply, wanted)


def _answer(reply: bytes, wanted: bytes) -> int | None:
    """The uid in the kernel's ``reply``; OSError for a reply that is not an answer to our
    one request (the caller falls back to the tables)."""
    _, kind, _, sequence, _ = _HEADER.unpack_from(reply.ljust(_HEADER.size, b"\0"))
    least = _HEADER.size + (4 if kind == NLMSG_ERROR else _ANSWER.size)
    if sequence != SEQUENCE or kind not in (NLMSG_ERROR, SOCK_DIAG_BY_FAMILY) or len(reply) < least:
        raise OSError(f"sock_diag: an unexpected reply (type {kind}, {len(reply)} bytes)")
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", reply, _HEADER.size)
        if code == _NOT_THERE:
            return None
        raise OSError(-code, f"sock_diag: {os.strerror(-code)}")
    _, state, _, _, found, _, _, _, uid, _ = _ANSWER.unpack_from(reply, _HEADER.size)
    if state == TCP_TIME_WAIT or found[: len(wanted)] != wanted:
        return None  # closed already, or a listener the lookup fell back to: not the caller
    return int(uid)


def table_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """``connection_owner`` read from ``/proc/net/tcp`` and ``/proc/net/tcp6``."""
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
    (word,) = struct.unpack_from("=I", _packed_v4(address[0]))
    return f"{word:08X}:{address[1]:04X}"


def _hex_v6(address: tuple[str, int]) -> str:
    """``address`` as /proc/net/tcp6 writes it: four native-order words (an IPv4 address
    of a dual-stack socket in its IPv4-mapped form)."""
    words = struct.unpack("=4I", _packed_v6(address[0]))
    return "".join(f"{word:08X}" for word in words) + f":{address[1]:04X}"


def _packed_v4(host: str) -> bytes:
    """An IPv4 address as inet_diag_sockid holds it: four bytes, then zeros."""
    return ipaddress.IPv4Address(_unmapped(host)).packed.ljust(16, b"\0")


def _packed_v6(host: str) -> bytes:
    """An address as an IPv6 socket holds it (an IPv4 one in its IPv4-mapped form)."""
    ip = ipaddress.ip_address(host.split("%")[0])
    if isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(f"::ffff:{ip}")
    return ip.packed


def _unmapped(host: str) -> str:
    """An IPv4 address, also from its IPv4-mapped IPv6 form; ValueError for any other."""
    ip = ipaddress.ip_address(host.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is None:
            raise ValueError(f"{host} is not an IPv4 address")
        return str(ip.ipv4_mapped)
    return str(ip)
