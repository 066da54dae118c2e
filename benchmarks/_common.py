"""Helpers shared by the benchmark scripts: environment record, JSON output, tables."""

from __future__ import annotations

import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"

# A script run as ``python benchmarks/x.py`` has only benchmarks/ on its path; with the
# repository root too it can use the test suite's references and data (tests.support).
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))


def exit_on_sigterm() -> None:
    """Turn SIGTERM (``timeout``, a scheduler) into SystemExit, so that the processes a
    benchmark started are stopped by its context managers instead of left running."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


CPU_FLAGS = ("aes", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "sha_ni")
"""Instruction sets figures move with: AES-GCM under TLS, BLAKE3's and SHA-256's paths, and
the kernels torch's oneDNN picks for a processor."""


def cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The processor's model and which of ``CPU_FLAGS`` it has (from Linux's ``cpuinfo``;
    empty elsewhere). The shared machine is not always the same hardware: one day it ran the
    same code 2.5 times as fast as the day before."""
    try:
        first = cpuinfo.read_text().split("\n\n")[0]
    except OSError:
        return {}
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in first.splitlines())
    }
    flags = set(fields.get("flags", "").split())
    return {
        "cpu_model": fields.get("model name"),
        "cpu_flags": [flag for flag in CPU_FLAGS if flag in flags],
    }


def environment() -> dict[str, Any]:
    """What the figures depend on: versions, threads, the processor and its core count."""
    return {
        **cpu(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def command_line() -> str:
    """The exact command that produced the figures, as it could be typed again."""
    return shlex.join([Path(sys.executable).name, *sys.argv])


def write_results(name: str, figures: dict[str, Any], settings: dict[str, Any]) -> Path:
    """Write ``results/<name>.json`` with the figures, the command line and the environment."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    record = {
        "benchmark": name,
        "command": command_line(),
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "environment": environment(),
        "settings": settings,
        "figures": figures,
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def export_tree(rev: str, into: Path) -> Path:
    """``rev``'s tree exported into ``into``, to put on PYTHONPATH for a side-by-side
    baseline run."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev], cwd=REPO_ROOT, capture_output=True, check=True
    )
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with right-aligned columns (numbers already formatted as text)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Stopwatch:
    """Wall-clock and process CPU time of a ``with`` block (accumulates over several blocks).

    On a shared machine the wall time of a single-threaded computation includes the time
    other processes held the core; the process CPU time does not, so side-by-side ratios of
    CPU times are the steadier figure there. Both are recorded.
    """

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._wall0
        self.cpu += time.process_time() - self._cpu0
