"""Ports reserved for a daemon to bind later: no one else can take them meanwhile, the
daemon's own server can, and a connection to one nobody listens on is refused."""

import errno
import socket
import socketserver
import threading

import pytest

from collabfl.kernel import ports
from collabfl.kernel.ports import HOLDS, LOOPBACK, PortReservation

HELD_ON_LINUX = pytest.mark.skipif(not HOLDS, reason="ports are held on Linux only")


def _plain_bind(port: int) -> None:
    """Bind ``port`` as a program without SO_REUSEADDR would; raises if it is taken."""
    with socket.socket() as other:
        other.bind((LOOPBACK, port))


@HELD_ON_LINUX
def test_a_reserved_port_cannot_be_bound_by_anyone_else_until_released() -> None:
    reservation = PortReservation(2)
    for port in reservation.ports:
        with pytest.raises(OSError) as refused:
            _plain_bind(port)
        assert refused.value.errno == errno.EADDRINUSE
    reservation.release()
    for port in reservation.ports:
        _plain_bind(port)


@HELD_ON_LINUX
def test_the_kernel_hands_no_reserved_port_to_another_reservation() -> None:
    with PortReservation(200) as first, PortReservation(200) as second:
        assert len(set(first.ports)) == 200
        assert not set(first.ports) & set(second.ports)


@HELD_ON_LINUX
def test_a_reserved_port_refuses_connections_until_a_server_listens_on_it() -> None:
    class Echo(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.wfile.write(self.rfile.readline())

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True  # as gRPC, uvicorn and asyncio servers set it

    with PortReservation(1) as reserved:
        (port,) = reserved.ports
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((LOOPBACK, port), timeout=5).close()
        with Server((LOOPBACK, port), Echo) as server:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                with socket.create_connection((LOOPBACK, port), timeout=5) as connection:
                    connection.sendall(b"hello\n")
                    assert connection.makefile("rb").readline() == b"hello\n"
            finally:
                server.shutdown()


def test_where_ports_cannot_be_held_they_are_picked_and_let_go(monkeypatch) -> None:
    """macOS and the BSDs would refuse the daemon's own bind beside a held socket."""
    monkeypatch.setattr(ports, "HOLDS", False)
    picked = PortReservation(2)
    assert len(set(picked.ports)) == 2
    for port in picked.ports:
        _plain_bind(port)
