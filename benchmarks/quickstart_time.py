"""Wall time of the README's main job: ``collabfl compare examples/quickstart.toml``.

The command runs as a subprocess from the repository root, into a fresh temporary output
directory each time, exactly as a user would type it (should examples/quickstart.toml be
missing, the config argument is left out and the built-in defaults run). The wall time
includes interpreter start-up, imports, data loading, all methods, plots and the results
table. Target: median < 180 s on 2 cores. The child's CPU time (user + system, from
getrusage(RUSAGE_CHILDREN)) is reported next to it: on a machine shared with other work the
wall time exceeds it by the time the cores were busy elsewhere.

Run: python benchmarks/quickstart_time.py [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO_ROOT, format_table, median, write_results

TARGET_S = 180.0
QUICKSTART = Path("examples/quickstart.toml")


def collabfl_executable() -> str:
    """The ``collabfl`` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "collabfl"
    if beside.exists():
        return str(beside)
    found = shutil.which("collabfl")
    if found is None:
        raise SystemExit("the collabfl console script is not installed (pip install -e .)")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="number of timed runs")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: the same command with --set rounds=2 (not the README's job)",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    config_args = [str(QUICKSTART)] if (REPO_ROOT / QUICKSTART).exists() else []
    extra = ["--set", "rounds=2"] if args.quick else []
    times: list[float] = []
    cpu_times: list[float] = []
    per_method: list[dict[str, float]] = []
    load_before = os.getloadavg()
    commands: list[str] = []
    methods: list[str] = []
    for rep in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="collabfl-quickstart-") as tmp:
            out = Path(tmp) / "run"
            command = [collabfl_executable(), "compare", *config_args, "--out", str(out), *extra]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(
                command, cwd=REPO_ROOT, capture_output=True, text=True, check=False
            )
            elapsed = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if done.returncode != 0:
                sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
                raise SystemExit(f"run {rep + 1} failed with exit code {done.returncode}")
            methods = sorted(p.name for p in out.iterdir() if (p / "summary.json").exists())
            summaries = json.loads((out / "summary.json").read_text())
            per_method.append({s["method"]: s["wall_time_s"] for s in summaries})
        times.append(elapsed)
        cpu_times.append(cpu)
        shown = ["collabfl", *("<tmp>" if c == str(out) else c for c in command[1:])]
        commands.append(" ".join(shown))
        print(
            f"  run {rep + 1}/{args.repeat}: {elapsed:.1f} s wall, {cpu:.1f} s CPU "
            f"({len(methods)} methods)",
            flush=True,
        )

    result = median(times)
    verdict = "ok" if result < TARGET_S else "over target"
    print()
    headers = ["config", "runs", "median s", "min s", "max s", "median CPU s", "target s"]
    row = [
        str(QUICKSTART) if config_args else "(built-in defaults)",
        str(len(times)),
        f"{result:.1f}",
        f"{min(times):.1f}",
        f"{max(times):.1f}",
        f"{median(cpu_times):.1f}",
        f"{TARGET_S:.0f}",
        verdict,
    ]
    print(format_table([*headers, "check"], [row]))
    print(
        f"load average (1 min) before the first run: {load_before[0]:.2f} on "
        f"{os.cpu_count()} cores; wall time above CPU time means the cores were shared"
    )
    method_rows = [
        [name, f"{median([run[name] for run in per_method]):.1f}"] for name in per_method[0]
    ]
    print()
    print(format_table(["method", "median s (in-process, from summary.json)"], method_rows))
    settings = {
        "repeat": args.repeat,
        "quick": args.quick,
        "config": str(QUICKSTART) if config_args else None,
        "subprocess_command": commands[0],
        "methods": methods,
    }
    figures = {
        "seconds": times,
        "cpu_seconds": cpu_times,
        "median_cpu_s": median(cpu_times),
        "load_average_before": list(load_before),
        "method_wall_s": per_method,
        "median_s": result,
        "target_s": TARGET_S,
        "within_target": result < TARGET_S,
    }
    path = write_results(
        "quickstart_time-quick" if args.quick else "quickstart_time", figures, settings
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
