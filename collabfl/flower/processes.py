"""Starting Flower's own processes (SuperLink, SuperNode, ``flwr``) and our warm ClientApp
executor from this installation."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from collabfl.kernel.python_command import module_command

CLIENT_RUNTIMES = ("warm", "subprocess")
"""How a client daemon runs ClientApp messages: one long-lived executor that keeps torch,
the data and the node in memory (``warm``, the default), or a fresh process per message, as
Flower's own executor starts (``subprocess``: slower, nothing loaded outlives a message).
Either way the SuperNode runs with ``--isolation process`` and our executor serves it, so
that only collabfl's installed ClientApp ever runs (flower/app_gate.py)."""
DEFAULT_RUNTIME = CLIENT_RUNTIMES[0]

SUPERNODE_CONNECTED = "SuperNode ID:"
"""What Flower 1.41's SuperNode logs once the SuperLink has registered and activated it."""
JOIN_CHECK_S = 0.02
"""How often ``wait_for_join`` looks at the log's size (a stat)."""


SUPEREXEC_POLL_S = 0.1
"""How often a SuperExec asks for a task (a ServerApp to launch on the coordinator, a
ClientApp message in the ``subprocess`` runtime). Flower's default is 1 s, which every run
launch and every such message would wait out; one loopback poll costs about a millisecond."""


def flower_env(flwr_home: Path) -> dict[str, str]:
    """Environment for Flower processes: no telemetry, our FLWR_HOME, the SuperExec's poll
    interval, and this interpreter's scripts first on PATH (Flower starts
    ``flower-superexec`` and ``flwr-*`` by name, which must resolve to the same installation
    even when the venv is not activated)."""
    scripts = str(Path(sys.executable).parent)
    return {
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(SUPEREXEC_POLL_S),
        "FLWR_HOME": str(flwr_home.resolve()),
        "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")]),
    }


def flower_entry_point(name: str) -> Callable[[], Any]:
    """Flower's console script ``name`` (``flower-superlink``, ``flower-supernode``) as a
    function, for a process of ours that runs it after preparing what it needs."""
    found = entry_points(group="console_scripts", name=name)
    if not found:
        raise SystemExit(f"Flower's {name} entry point is not installed")
    function: Callable[[], Any] = next(iter(found)).load()
    return function


def flower_binary(name: str) -> str:
    """Flower's console scripts live next to this interpreter."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def executor_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a ClientApp executor: glibc's malloc held to one arena, unless the
    operator chose a number (``MALLOC_ARENA_MAX`` set already).

    The executor fetches peer models over gRPC, whose threads allocate each received chunk
    in arenas of their own; the chunks, freed by the thread that decodes them, stayed
    spread over several arenas. One arena reuses them (benchmarks/peer_link.py, 200 MB over
    10 Gbit with mutual TLS, the fetcher alone changed: 0.90-0.98 of raw TCP against
    0.78-0.82, and 1.06-1.16x the model in extra memory against 1.11-1.24x;
    docs/performance.md). Other C libraries ignore the variable."""
    return {**env, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "1")}


def warm_executor_command(
    runtime_api: str,
    poll_s: float = 0.1,
    supernode_log: Path | None = None,
    per_task: bool = False,
    secret_file: Path | None = None,
) -> list[str]:
    """The executor (flower/warm_executor.py) of the SuperNode whose runtime API (its
    ``--port``) is at ``runtime_api`` and whose log is ``supernode_log``; ``per_task``: a
    fresh process per task. Kept here so that starting one imports no flwr."""
    command = module_command(
        "collabfl.flower.warm_executor", "--runtime-api", runtime_api, "--poll", str(poll_s)
    )
    if supernode_log is not None:
        command += ["--supernode-log", str(supernode_log)]
    if per_task:
        command.append("--per-task")
    if secret_file is not None:
        command += ["--superexec-secret-file", str(secret_file)]
    return command


def wait_for_join(supernode_log: Path, timeout_s: float, stopping: threading.Event) -> bool:
    """Whether the SuperNode logged, within ``timeout_s``, that it joined the SuperLink.

    A line from before a restart counts (the log is appended to): the node joined then, and
    what waits on this need not wait again. The log is read only when it has grown.
    """
    deadline = time.monotonic() + timeout_s
    seen = -1
    while (left := deadline - time.monotonic()) > 0:
        try:
            size = supernode_log.stat().st_size
        except OSError:  # not written yet
            size = -1
        if size != seen and has_joined(supernode_log):
            return True
        seen = size
        if stopping.wait(min(JOIN_CHECK_S, left)):
            return False
    return False


def has_joined(supernode_log: Path) -> bool:
    """Whether the SuperNode's log says it joined the SuperLink (at any time)."""
    try:
        return SUPERNODE_CONNECTED.encode() in supernode_log.read_bytes()
    except OSError:  # not written yet
        return False
