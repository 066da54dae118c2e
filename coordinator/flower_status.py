"""What only the coordinator's machine knows about Flower: the SuperNodes connected to its
SuperLink and the Flower run behind each of our runs.

The coordinator service records members and runs. The SuperLink knows which SuperNodes are
connected (asked with ``flwr supernode list`` under the coordinator's ``FLWR_HOME``,
``<state-dir>/flwr``), and the run launcher keeps flwr's reply to each run's latest launch,
naming its Flower run, in the state directory (``launch.flower_run_file``). Both are read
through the coordinator's state directory, so ``collabfl admin status --state-dir`` works
on that machine only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collabfl.coordinator.daemon import CONNECTION
from collabfl.coordinator.flower_runs import FlowerCliError, list_supernodes, submitted_run_id
from collabfl.coordinator.launch import flower_run_file
from collabfl.coordinator.state import Run
from collabfl.flower.processes import flower_env


@dataclass(frozen=True)
class FlowerStatus:
    supernodes: list[dict[str, Any]] | None
    """As flwr lists them; None when the SuperLink did not answer (``supernodes_error``)."""
    supernodes_error: str
    flower_runs: dict[str, int | None]
    """Our run id -> the Flower run of its latest launch (None before the first launch)."""


def flower_status(state_dir: Path, runs: Iterable[Run]) -> FlowerStatus:
    try:
        nodes, error = supernodes(state_dir), ""
    except FlowerCliError as failure:
        nodes, error = None, str(failure)
    return FlowerStatus(nodes, error, {run.run_id: flower_run_id(state_dir, run) for run in runs})


def supernodes(state_dir: Path) -> list[dict[str, Any]]:
    """The SuperNodes the coordinator's SuperLink knows (raises FlowerCliError if it is down)."""
    return list_supernodes(CONNECTION, {**os.environ, **flower_env(state_dir / "flwr")})


def flower_run_id(state_dir: Path, run: Run) -> int | None:
    """The Flower run the launcher last started for ``run``, from the reply it kept."""
    try:
        return submitted_run_id(flower_run_file(state_dir, run.run_id).read_text(errors="replace"))
    except (OSError, FlowerCliError):
        return None
