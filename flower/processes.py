"""Starting Flower's own processes (SuperLink, SuperNode, ``flwr``) and our warm ClientApp
executor from this installation."""

from __future__ import annotations

import os
import sys
from pathlib import Path

CLIENT_RUNTIMES = ("subprocess", "warm")
"""How a client daemon runs ClientApp messages: Flower's fresh process per message
(``subprocess``), or one long-lived executor that keeps the node in memory (``warm``)."""


def flower_env(flwr_home: Path) -> dict[str, str]:
    """Environment for Flower processes: no telemetry, our FLWR_HOME, and this interpreter's
    scripts first on PATH (Flower starts ``flower-superexec`` and ``flwr-*`` by name, which
    must resolve to the same installation even when the venv is not activated)."""
    scripts = str(Path(sys.executable).parent)
    return {
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_HOME": str(flwr_home.resolve()),
        "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")]),
    }


def flower_binary(name: str) -> str:
    """Flower's console scripts live next to this interpreter."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def warm_executor_command(runtime_api: str, poll_s: float = 0.1) -> list[str]:
    """The long-lived executor (flower/warm_executor.py) of the SuperNode whose runtime API
    (its ``--port``) is at ``runtime_api``; kept here so that starting one imports no flwr."""
    return [
        sys.executable, "-m", "collabfl.flower.warm_executor",
        "--runtime-api", runtime_api, "--poll", str(poll_s),
    ]  # fmt: skip
