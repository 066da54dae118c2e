"""The multi-host test bed itself: namespaces on a bridge, addresses, caps, teardown."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.support.netns import Link, NetworkBed, netem_reason, unavailable_reason

REASON = unavailable_reason()
pytestmark = [pytest.mark.netns, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

SERVER = """
import socket, sys, time
server = socket.create_server((sys.argv[1], 7000))
conn, peer = server.accept()
total, first = 0, None
while chunk := conn.recv(65536):
    first = first or time.monotonic()
    total += len(chunk)
print(peer[0], total, time.monotonic() - first, flush=True)
"""

CLIENT = """
import socket, sys, time
for _ in range(100):
    try:
        conn = socket.create_connection((sys.argv[1], 7000), timeout=5)
        break
    except OSError:
        time.sleep(0.05)
conn.sendall(b"x" * int(sys.argv[2]))
conn.close()
"""


def _send(bed: NetworkBed, log, size: int) -> tuple[str, int, float]:
    """``size`` bytes from host b to a TCP server on host a: (sender, bytes, seconds)."""
    a = bed.addresses["a"]
    server = bed.popen("a", [sys.executable, "-c", SERVER, a], log)
    sent = bed.run("b", [sys.executable, "-c", CLIENT, a, str(size)])
    assert sent.returncode == 0, sent.stderr
    server.wait(timeout=30)
    sender, total, seconds = log.read_text().split()[-3:]
    return sender, int(total), float(seconds)


def test_two_hosts_talk_over_tcp_through_the_bridge(tmp_path):
    with NetworkBed(["a", "b"]) as bed:
        assert len({bed.gateway, *bed.addresses.values()}) == 3
        assert _send(bed, tmp_path / "a.log", 1000)[:2] == (bed.addresses["b"], 1000)
        assert "UP" in bed.run("a", ["ip", "-o", "link", "show", "lo"]).stdout
        # the test process, on the bridge, reaches host a: no server now, so refused
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((bed.addresses["a"], 7000), timeout=5)


def test_bandwidth_cap_is_applied_and_slows_the_link(tmp_path):
    with NetworkBed(["a", "b"], link=Link(rate="4mbit", burst="32kb")) as bed:
        assert "tbf" in bed.qdiscs("a") and "4Mbit" in bed.qdiscs("a")
        _, total, seconds = _send(bed, tmp_path / "a.log", 500_000)
        assert total == 500_000
        assert seconds > 0.6  # 4 Mbit at 4 Mbit/s is about 1 s; an uncapped veth takes ms


def test_teardown_removes_namespaces_bridge_and_processes(tmp_path):
    with NetworkBed(["a"]) as bed:
        sleeper = bed.popen("a", ["sleep", "600"], tmp_path / "sleep.log")
    assert sleeper.poll() is not None
    assert bed.token not in _listing("netns", "list")
    assert bed.token not in _listing("-o", "link")


def test_a_failed_setup_leaves_nothing_behind():
    bed = NetworkBed(["a", "b"], link=Link(rate="not-a-rate"))
    with pytest.raises(subprocess.CalledProcessError):
        bed.__enter__()
    assert bed.token not in _listing("netns", "list")
    assert bed.token not in _listing("-o", "link")


def test_netem_delay_where_the_kernel_has_it():
    reason = netem_reason()
    if reason is not None:
        print(f"netem part not run: {reason}")  # only the delay part; the rest runs without it
        return
    with NetworkBed(["a"]) as bed:
        namespace = bed.namespace("a")
        delay = ["root", "netem", "delay", "20ms"]
        added = subprocess.run(
            ["tc", "-n", namespace, "qdisc", "replace", "dev", "eth0", *delay],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr


def _listing(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout
