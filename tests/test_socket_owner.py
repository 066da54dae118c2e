"""kernel/socket_owner.py: the uid behind a loopback connection, read from the kernel.

Each case runs through both ways of asking: sock_diag (the one used) and the /proc tables
(its fallback)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from collabfl.kernel import socket_owner
from collabfl.kernel.socket_owner import (
    connection_owner,
    diag_owner,
    owner_lookup_available,
    table_owner,
)
from tests.support.other_user import STRANGER_UID, SYSTEM_PYTHON, as_stranger

pytestmark = pytest.mark.skipif(not owner_lookup_available(), reason="needs /proc/net/tcp")

CONNECT_AND_WAIT = """
import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1]))).recv(1)
"""


@pytest.fixture(params=[diag_owner, table_owner], ids=["sock_diag", "tables"])
def lookup(request):
    return request.param


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(20)
        yield server


def test_this_users_connection_is_this_users(listener, lookup):
    with socket.create_connection(listener.getsockname()):
        accepted, peer = listener.accept()
        with accepted:
            assert lookup(peer, accepted.getsockname()) == os.geteuid()


def test_a_dual_stack_caller_is_found_in_tcp6(listener, lookup):
    with socket.socket(socket.AF_INET6) as caller:
        caller.connect(("::ffff:127.0.0.1", listener.getsockname()[1]))
        accepted, peer = listener.accept()
        with accepted:
            assert lookup(peer, accepted.getsockname()) == os.geteuid()


def test_another_users_connection_is_theirs(listener, lookup):
    port = str(listener.getsockname()[1])
    stranger = subprocess.Popen(as_stranger([SYSTEM_PYTHON, "-c", CONNECT_AND_WAIT, port]))
    try:
        accepted, peer = listener.accept()
        with accepted:
            assert lookup(peer, accepted.getsockname()) == STRANGER_UID
            accepted.sendall(b"x")  # lets the stranger go
    finally:
        stranger.wait(timeout=20)


def test_a_closed_connection_has_no_owner_even_in_time_wait(listener, lookup):
    caller = socket.create_connection(listener.getsockname())
    accepted, peer = listener.accept()
    local = accepted.getsockname()
    caller.close()  # the caller's side waits in TIME_WAIT, shown as uid 0's
    accepted.close()
    time.sleep(0.2)
    assert lookup(peer, local) is None


def test_a_listener_on_the_callers_address_is_not_the_caller(listener, lookup):
    """With no connection from that address, the kernel's lookup answers with the socket
    listening there; its owner must not pass for a caller's."""
    assert lookup(listener.getsockname(), ("127.0.0.1", 9)) is None


def test_the_tables_answer_where_sock_diag_is_refused(listener, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError("sock_diag refused")

    monkeypatch.setattr(socket_owner, "diag_owner", refused)
    with socket.create_connection(listener.getsockname()):
        accepted, peer = listener.accept()
        with accepted:
            assert connection_owner(peer, accepted.getsockname()) == os.geteuid()


@pytest.mark.parametrize(
    "reply",
    [
        b"",
        b"\0" * 8,
        socket_owner._HEADER.pack(36, 3, 0, 1, 0),
        socket_owner._HEADER.pack(16, 20, 0, 2, 0),
    ],
    ids=["empty", "short", "done, not an answer", "another sequence"],
)
def test_a_reply_that_answers_nothing_is_an_error_the_tables_then_answer(reply):
    with pytest.raises(OSError):
        socket_owner._answer(reply, b"")
