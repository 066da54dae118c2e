"""``kill -TERM`` on ``collabfl compare``: the whole process tree stops, the run dir says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SETTINGS = [
    "data.num_train=400",
    "data.num_test=200",
    "data.num_clients=3",
    "rounds=100000",  # it runs until it is stopped
    "epochs=0.5",
    "jobs=2",
]


def _descendants(pid: int) -> set[int]:
    """All processes below ``pid`` (Linux /proc)."""
    found: set[int] = set()
    pending = [pid]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            children = (task / "children").read_text().split()
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    pending.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait(condition, what: str, limit_s: float = 300.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit_s} s"
        time.sleep(0.2)


def test_sigterm_stops_every_worker_and_marks_the_runs_interrupted(
    mnist1d_cache: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    overrides = [*SETTINGS, f"data.cache_dir={json.dumps(str(mnist1d_cache))}"]
    command = [str(Path(sys.executable).with_name("collabfl")), "compare"]
    command += ["--methods", "local,fedavg", "--out", str(out)]
    command += [arg for o in overrides for arg in ("--set", o)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        metrics = [out / name / "metrics.jsonl" for name in ("local", "fedavg")]
        _wait(lambda: all(m.exists() and m.read_text().strip() for m in metrics), "two rounds")
        workers = _descendants(process.pid)
        assert len(workers) >= 2, workers
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    _wait(lambda: not any(_alive(pid) for pid in workers), "the workers' exit", limit_s=60)
    assert "Traceback" not in stdout + stderr, stdout + stderr
    assert "interrupted" in stderr
    for name in ("local", "fedavg"):
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["status"] == "interrupted"
        assert 1 <= summary["rounds"] < 100000
    table = json.loads((out / "summary.json").read_text())  # the comparison, cut short
    assert [(s["method"], s["status"]) for s in table] == [
        ("local", "interrupted"),
        ("fedavg", "interrupted"),
    ]
    assert "Partial: local, fedavg did not finish" in (out / "results.md").read_text()
    assert "--resume" in stderr
