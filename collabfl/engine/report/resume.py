"""What ``--resume`` may keep of an earlier run folder: a method's run is kept only when it
finished under the very settings asked for now; anything else is run again, and a run of
other settings is refused, so a resumed comparison never mixes two settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collabfl.engine.report.run_dir import CONFIG_FILE, SUMMARY_FILE

NOT_RESULTS = ("jobs", "tracking")
"""Config keys a resume may change: how many methods run at once and where progress is
also sent change no number of a run."""
ADDED_TO_DATA = ("true_groups",)
"""What the record adds to the config's ``data`` section (engine.experiment.data_record)."""


def setting_differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """The dotted config keys whose recorded value is not the wanted one (the record's
    ``resolved`` section and what it adds to ``data`` are derived, not settings)."""
    recorded = {k: v for k, v in recorded.items() if k != "resolved"}
    data = recorded.get("data")
    if isinstance(data, dict):
        recorded["data"] = {k: v for k, v in data.items() if k not in ADDED_TO_DATA}
    wanted = json.loads(json.dumps(wanted))  # the record's JSON types (lists, str paths)
    return _differences(recorded, wanted, "")


def _differences(recorded: Any, wanted: Any, prefix: str) -> list[str]:
    if not (isinstance(recorded, dict) and isinstance(wanted, dict)):
        return [] if recorded == wanted else [prefix.rstrip(".")]
    keys = sorted(set(recorded) | set(wanted))
    return [
        found
        for key in keys
        if not (prefix == "" and key in NOT_RESULTS)
        for found in _differences(recorded.get(key), wanted.get(key), f"{prefix}{key}.")
    ]


def finished_summary(run_dir: Path, wanted: dict[str, Any]) -> dict[str, Any] | None:
    """The summary of the run in ``run_dir`` when it finished with the ``wanted`` config
    (a ``model_dump(mode="json")``); None when there is none to keep (never started, cut
    short). A run of other settings raises ValueError naming the keys that differ."""
    config = run_dir / CONFIG_FILE
    if not config.exists():
        return None
    differ = setting_differences(json.loads(config.read_text(encoding="utf-8")), wanted)
    if differ:
        raise ValueError(
            f"--resume: {run_dir} was run with other settings ({', '.join(differ)}); "
            "resume with the same config and --set options, or start anew with --overwrite"
        )
    summary_path = run_dir / SUMMARY_FILE
    if not summary_path.exists():
        return None
    summary: dict[str, Any] = json.loads(summary_path.read_text(encoding="utf-8"))
    return summary if summary.get("status") == "finished" else None


def ended_summary(run_dir: Path, label: str, planned: int) -> dict[str, Any]:
    """A method's line in a comparison cut short: its summary when it ended (finished,
    failed, stopped); else how far it got, without numbers (a cut-short run's numbers are
    not the method's result)."""
    path = run_dir / SUMMARY_FILE
    summary: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if summary and summary.get("status") != "interrupted":
        return summary
    return {
        "method": label,
        "status": summary.get("status", "interrupted"),
        "rounds": summary.get("rounds", 0),
        "rounds_planned": planned,
    }
