"""Where launch → first round goes: when each step of a federation's start was first seen,
and the CPU each kind of process spent until the first round was done.

A watcher thread reads the federation's logs as they grow (every ``CHECK_S``) and notes
the first time each phase's line appears; the benchmark marks what it sees itself (the run
created, the first round done). On a 2-core machine every process of the start shares
the cores, so the CPU seconds by role say what a phase's wall time is made of.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHECK_S = 0.05
"""How often the logs are looked at (a stat each; read only when grown)."""


@dataclass(frozen=True)
class Marker:
    """A phase ends when ``text`` first appears in the file ``pattern`` names (a glob
    under the federation's folder), in every such file when ``every``."""

    phase: str
    pattern: str
    text: str
    every: bool = False


MARKERS = (
    Marker("coordinator_up", "logs/coordinator.log", "superlink started"),
    Marker("superlink_listening", "coordinator/superlink.log", "Uvicorn running on"),
    Marker("keys_restored", "logs/coordinator.log", "SuperNode keys registered again"),
    Marker("supernodes_joined", "client-*/supernode.log", "SuperNode ID:", every=True),
    Marker("executors_loaded", "client-*/executor.log", "serving ", every=True),
    Marker("run_launching", "logs/coordinator.log", "launching run"),
    Marker("run_submitted", "coordinator/superlink.log", "ControlServicer.StartRun"),
    Marker("serverapp_started", "coordinator/serverapps.log", "Start `flwr-serverapp`"),
    Marker("setup_delivered", "client-*/supernode.log", "Receiving: query.setup"),
    Marker("round0_delivered", "client-*/supernode.log", "Receiving: query.program"),
)
"""In the order a start passes them; ``keys_restored`` only with TLS after a restart."""

ROLES = (
    "coordinator_daemon", "superlink", "serverapp", "flwr_cli", "client_daemon", "supernode",
    "executor", "other",
)  # fmt: skip


def role(cmdline: list[str]) -> str:
    """Which process of a federation a command line is."""
    text = " ".join(cmdline)
    for needle, name in (
        ("flower-superlink", "superlink"),
        ("owner_gated_superlink", "superlink"),  # the daemon's SuperLink, gated on its user
        ("flower-supernode", "supernode"),
        ("quick_reply_supernode", "supernode"),  # the daemon's SuperNode, its poll shortened
        ("flwr-serverapp", "serverapp"),
        ("serverapp_template", "serverapp"),
        ("collabfl.flower.warm_executor", "executor"),
        ("collabfl.coordinator.daemon", "coordinator_daemon"),
        ("collabfl.client.daemon", "client_daemon"),
    ):
        if needle in text:
            return name
    return "flwr_cli" if "/flwr " in f"{text} " else "other"


def process_tree(roots: list[int]) -> dict[int, list[str]]:
    """Every live process under ``roots`` (themselves included) with its command line."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree: dict[int, list[str]] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            tree[pid] = [p.decode(errors="replace") for p in raw.split(b"\0") if p]
            todo.extend(children.get(pid, []))
    return tree


def cpu_by_role(roots: list[int]) -> dict[str, float]:
    """CPU seconds so far of every process under ``roots``, by role: each one's own and its
    reaped children's (a short-lived process a daemon ran counts as that daemon's)."""
    used = dict.fromkeys(ROLES, 0.0)
    for pid, cmdline in process_tree(roots).items():
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used[role(cmdline)] += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return used


class LaunchWatch:
    """Seconds from ``start()`` to each phase; a context manager around the federation."""

    def __init__(self, folder: Path, markers: tuple[Marker, ...] = MARKERS) -> None:
        self.folder = folder
        self.markers = markers
        self.at: dict[str, float] = {}
        self.cpu_s: dict[str, float] = {}
        self._seen: dict[str, set[Path]] = {m.phase: set() for m in markers}
        self._read: dict[tuple[Path, str], int] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="launch-watch", daemon=True)
        self.started = 0.0

    def __enter__(self) -> LaunchWatch:
        self.started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join()

    def mark(self, phase: str) -> None:
        """A phase the benchmark saw itself, at this moment (the first mark counts)."""
        self.at.setdefault(phase, time.perf_counter() - self.started)

    def take_cpu(self, roots: list[int]) -> None:
        """The federation's CPU seconds by role until now."""
        self.cpu_s = cpu_by_role(roots)

    def phases(self) -> list[dict[str, Any]]:
        """Each phase seen, in time order: when (s from launch) and since the previous."""
        ordered = sorted(self.at.items(), key=lambda item: item[1])
        rows, previous = [], 0.0
        for phase, at in ordered:
            rows.append({"phase": phase, "at_s": round(at, 2), "step_s": round(at - previous, 2)})
            previous = at
        return rows

    def _watch(self) -> None:
        while not self._stopping.wait(CHECK_S):
            for marker in self.markers:
                if marker.phase not in self.at:
                    self._look(marker)

    def _look(self, marker: Marker) -> None:
        files = sorted(self.folder.glob(marker.pattern))
        seen = self._seen[marker.phase]
        for path in files:
            if path not in seen and self._contains(path, marker.text):
                seen.add(path)
        if seen and (not marker.every or len(seen) == len(files)):
            self.mark(marker.phase)

    def _contains(self, path: Path, text: str) -> bool:
        """Whether the file holds ``text``; read again only when it has grown."""
        try:
            size = path.stat().st_size
            if self._read.get((path, text)) == size:
                return False
            self._read[path, text] = size
            return text.encode() in path.read_bytes()
        except OSError:  # not written yet
            return False
