"""Flower runs, driven through the ``flwr`` CLI and read back from its JSON output (SuperNode
registrations are calls of the daemon itself: coordinator/superlink/superlink_control.py).

``flwr run --format json`` submits the app and prints one JSON object::

    {"success": true, "run-id": "9719863562065456825", "federation-id": "@none/default",
     "fab-id": "collabfl/collabfl-federation", ...}

and on failure still exits 0 with ``{"success": false, "error-message": "..."}``, so success
is read from the object, never from the exit status. In JSON mode flwr swallows everything it
would print besides that object, streamed logs included, so ``--stream`` is no use with it:
the ServerApp's log is followed by a separate ``flwr log <run id> --stream``, which replays the
log from the start and ends when the run does.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collabfl.flower.processes import flower_binary

CLI_TIMEOUT_S = 120.0
"""Submitting or stopping is one request to the SuperLink; longer means it is not answering."""


class FlowerCliError(RuntimeError):
    """``flwr`` failed, or printed something other than the JSON object expected of it."""


def submitted_run_id(output: str) -> int:
    """The Flower run id in the output of ``flwr run --format json``."""
    reply = _reply("flwr run", output)
    run_id = reply.get("run-id")
    if not isinstance(run_id, str) or not run_id.isdigit():
        raise FlowerCliError(f"flwr run reported success but no run id: {_one_line(output)}")
    return int(run_id)


def submit_run(app_dir: Path, connection: str, run_config: Path, env: Mapping[str, str]) -> str:
    """Submit the app with the run config in the TOML file ``run_config`` (launch.py,
    ``write_run_config``); return flwr's output as it is.

    ``submitted_run_id`` reads the id from it (or says why it cannot), now or later from a
    kept copy.
    """
    return _flwr(["run", str(app_dir), connection, "-c", str(run_config)], env)


def stop_run(run_id: int, connection: str, env: Mapping[str, str]) -> None:
    """Ask the SuperLink to stop Flower run ``run_id`` (refused once it has ended)."""
    _reply("flwr stop", _flwr(["stop", str(run_id), connection], env))


def follow_command(run_id: int, connection: str) -> list[str]:
    """The command printing run ``run_id``'s log from its start until the run ends."""
    return [flower_binary("flwr"), "log", str(run_id), connection, "--stream"]


def _flwr(args: list[str], env: Mapping[str, str]) -> str:
    """Run ``flwr <args> --format json``; its stdout, or its stderr's end when stdout is empty."""
    command = [flower_binary("flwr"), *args, "--format", "json"]
    try:
        done = subprocess.run(
            command, env=dict(env), capture_output=True, text=True, timeout=CLI_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise FlowerCliError(f"flwr {args[0]} did not finish within {CLI_TIMEOUT_S:g} s") from None
    return done.stdout if done.stdout.strip() else done.stderr[-1000:]


def _reply(command: str, output: str) -> dict[str, Any]:
    try:
        reply = json.loads(output)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise FlowerCliError(f"{command} printed no JSON object: {_one_line(output)!r}")
    if reply.get("success") is not True:
        reason = reply.get("error-message", "no reason given")
        raise FlowerCliError(f"{command} failed: {_one_line(str(reason))}")
    return reply


def _one_line(text: str) -> str:
    """flwr's multi-line messages as one line, so each failure is one line of the log."""
    return " ".join(text.split())
