"""A multi-host test bed on one machine: network namespaces on a private bridge.

``NetworkBed`` builds a Linux bridge and one network namespace per named host, each joined
to the bridge by a veth pair, with its own address on a private /24 and its loopback up.
The bridge itself holds the subnet's first address, so the test process (the "operator's
machine") reaches every host; the hosts reach each other through the bridge only. Each
link can carry a bandwidth cap (``tc qdisc ... tbf``, both directions). Processes started
through the bed run inside a host's namespace with this checkout first on ``PYTHONPATH``
(start Python as ``sys.executable``, the venv's); leaving the context kills them and
deletes the namespaces, the veth pairs and the bridge, even when setting up failed half
way. Names carry a random token so
parallel test workers never collide.

Needs root and iproute2 (``ip netns``); ``unavailable_reason()`` says why not, for a skip.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import secrets
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from collabfl.kernel.supervisor import stop_group

REPO_ROOT = Path(__file__).resolve().parents[2]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable_reason() -> str | None:
    """Why this machine cannot build a bed (not root, no ``ip``, no netns), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    probe = f"cfprobe-{secrets.token_hex(3)}"
    created = _ip("netns", "add", probe, check=False)
    if created.returncode != 0:
        return f"`ip netns add` fails here: {created.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def netem_reason() -> str | None:
    """Why ``tc qdisc ... netem`` (delay) cannot be used here, or None when it can."""
    probe = f"cfprobe-{secrets.token_hex(3)}"
    _ip("netns", "add", probe)
    try:
        result = subprocess.run(
            ["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return None if result.returncode == 0 else f"netem unavailable: {result.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    """A random 10.x.y.0/24 that no route on this machine covers yet."""
    routes = _ip("-4", "route", "show", "table", "all").stdout
    used = [
        ipaddress.ip_network(word, strict=False)
        for line in routes.splitlines()
        for word in line.split()[:2]
        if "/" in word and word[0].isdigit()
    ]
    for _ in range(100):
        subnet = ipaddress.ip_network(f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24")
        if not any(subnet.overlaps(route) for route in used):
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 subnet for a test bed")


@dataclass(frozen=True)
class Link:
    """A bandwidth cap applied to one host's link in both directions (tc tbf)."""

    rate: str = "100mbit"
    burst: str = "256kb"
    latency: str = "50ms"

    def qdisc(self) -> list[str]:
        return ["root", "tbf", "rate", self.rate, "burst", self.burst, "latency", self.latency]


@dataclass
class NetworkBed:
    """Hosts (namespaces) named ``hosts`` on one bridge; a context manager.

    ``link``: a bandwidth cap for every host's link (None: none).
    """

    hosts: Sequence[str]
    link: Link | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    subnet: ipaddress.IPv4Network = field(init=False)
    addresses: dict[str, str] = field(init=False, default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if len(set(self.hosts)) != len(self.hosts) or not self.hosts:
            raise ValueError(f"host names must be distinct and non-empty: {self.hosts}")
        if len(self.hosts) > 200:
            raise ValueError("a /24 bed holds at most 200 hosts")
        self.bridge = f"cfb{self.token}"

    def namespace(self, host: str) -> str:
        return f"cf-{self.token}-{host}"

    def _veth(self, host: str) -> str:
        return f"cfv{self.token}{self.hosts.index(host)}"

    @property
    def gateway(self) -> str:
        """The bridge's own address: how the hosts reach the test process."""
        return str(self.subnet.network_address + 1)

    def __enter__(self) -> NetworkBed:
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def _build(self) -> None:
        self.subnet = _free_subnet()
        prefix = self.subnet.prefixlen
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{prefix}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for index, host in enumerate(self.hosts):
            namespace, veth = self.namespace(host), self._veth(host)
            address = str(self.subnet.network_address + 2 + index)
            _ip("netns", "add", namespace)
            _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
            _ip("link", "set", f"{veth}p", "netns", namespace)
            _ip("-n", namespace, "link", "set", f"{veth}p", "name", "eth0")
            _ip("-n", namespace, "addr", "add", f"{address}/{prefix}", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            self.addresses[host] = address
            if self.link is not None:
                self.cap(host, self.link)

    def cap(self, host: str, link: Link) -> None:
        """Cap ``host``'s link both ways: egress of its eth0 and of the bridge-side veth."""
        subprocess.run(
            ["tc", "-n", self.namespace(host), "qdisc", "replace", "dev", "eth0", *link.qdisc()],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            ["tc", "qdisc", "replace", "dev", self._veth(host), *link.qdisc()],
            check=True, capture_output=True,
        )  # fmt: skip

    def qdiscs(self, host: str) -> str:
        """``tc qdisc show`` of the host's eth0, for checks."""
        return subprocess.run(
            ["tc", "-n", self.namespace(host), "qdisc", "show", "dev", "eth0"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    def resolve(self, names: Mapping[str, str], hosts: Sequence[str] | None = None) -> None:
        """Give ``hosts`` (default: every host) an /etc/hosts mapping each DNS name of
        ``names`` to the address of the bed host it names; ``ip netns exec`` mounts
        ``/etc/netns/<namespace>/hosts`` over ``/etc/hosts``, so each host may see its own."""
        lines = ["127.0.0.1 localhost"]
        lines += [f"{self.addresses[host]} {name}" for name, host in names.items()]
        for host in hosts or self.hosts:
            folder = Path("/etc/netns") / self.namespace(host)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text("\n".join(lines) + "\n")

    def address(self, host: str) -> str:
        """``host``'s address on the bridge (with ``command``: a federation's ``Hosts``)."""
        return self.addresses[host]

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    @staticmethod
    def env() -> dict[str, str]:
        """The environment for processes in the bed: this checkout first on PYTHONPATH."""
        path = os.environ.get("PYTHONPATH", "")
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), path) if p)}

    def run(
        self, host: str, argv: Sequence[str], timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in ``host`` to completion; its output as text, never raising on rc."""
        return subprocess.run(
            self.command(host, argv), capture_output=True, text=True,
            env=self.env(), timeout=timeout_s, check=False,
        )  # fmt: skip

    def popen(
        self, host: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host`` (its own process group), output to ``log``, with ``env``
        added to the bed's; the bed stops it on exit."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as handle:
            process = subprocess.Popen(
                self.command(host, argv), stdout=handle, stderr=subprocess.STDOUT,
                env={**self.env(), **(env or {})}, start_new_session=True,
            )  # fmt: skip
        self.processes.append(process)
        return process

    def teardown(self) -> None:
        """Stop what the bed started, then delete namespaces, veths and the bridge.

        Every step tolerates what an earlier failure left half-built.
        """
        for process in self.processes:
            stop_group(process, grace_s=10.0)
        for host in self.hosts:
            namespace = self.namespace(host)
            for pid in _ip("netns", "pids", namespace, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)  # started inside our own namespace
            _ip("netns", "del", namespace, check=False)
            _ip("link", "del", self._veth(host), check=False)
            shutil.rmtree(Path("/etc/netns") / namespace, ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)
