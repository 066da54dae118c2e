"""What only the coordinator's machine knows about Flower: the Flower run behind each of our
runs.

The run launcher keeps the Flower run of each run's latest launch in the state directory
(``launch.flower_run_file``); it is read through the coordinator's state directory, so
``collabfl admin status --state-dir`` names it on that machine only. (The SuperNodes
connected to the SuperLink reach every operator through the service's ``Status``:
coordinator/member_status.py.)
"""

from __future__ import annotations

from pathlib import Path

from collabfl.coordinator.store.records import Run
from collabfl.coordinator.superlink.flower_runs import recorded_flower_run
from collabfl.coordinator.superlink.launch import flower_run_file


def flower_run_id(state_dir: Path, run: Run) -> int | None:
    """The Flower run the launcher last started for ``run``, from the record it kept."""
    try:
        record = flower_run_file(state_dir, run.run_id).read_text(errors="replace")
        return recorded_flower_run(record)
    except (OSError, ValueError):
        return None
