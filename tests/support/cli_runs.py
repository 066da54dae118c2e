"""Driving the ``collabfl`` command line in-process, as the end-to-end tests do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import Result
from typer.testing import CliRunner

from collabfl.cli.main import app

SMALL = [
    "data.num_train=1200",
    "data.num_test=600",
    "data.num_clients=6",
    "rounds=3",
    "epochs=0.5",
    "dpfl.init_epochs=1",
    "dpfl.budget=2",
]
"""A federation small enough for a CLI run in a few seconds."""

IN_THIS_PROCESS = ["--set", "jobs=1"]
"""For ``compare``: run the methods one after another in this process. Where each takes a
second or less, a worker process would spend seconds of CPU importing torch first (that
parallel and sequential runs agree is tests/test_simulate_e2e.py's to check)."""


def small_args(cache: Path, *extra: str) -> list[str]:
    """``--set`` arguments for the SMALL federation plus ``extra`` overrides."""
    return set_args([*SMALL, *extra], cache)


def set_args(overrides: list[str], cache: Path) -> list[str]:
    """``--set`` arguments for ``overrides``, with the MNIST-1D cache in ``cache``."""
    every = [*overrides, f"data.cache_dir={json.dumps(str(cache))}"]
    return [arg for o in every for arg in ("--set", o)]


def without_timings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without the timings (``*_s``), which no two runs share."""
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


def invoke(*args: str) -> Result:
    """Run the CLI; fail the test with its output unless it exits 0."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result
