"""The README's main job, `collabfl compare examples/quickstart.toml`, against a baseline.

Each repetition runs the command twice as a subprocess from the repository root, once with
this tree's code and once with ``--baseline REV``'s (``git archive`` into a temporary folder
put first on PYTHONPATH, so the same console script and virtual environment import the old
package; the spawned workers inherit it), alternating which goes first, so both see the same
machine load. It prints wall time, the children's CPU time and each method's in-worker wall
time, the medians over ``--repeat`` and the ratio new / baseline, and writes
``benchmarks/results/main_job.json`` (``main_job-set.json`` with ``--set``).

It also sums each method's step timings (metrics.jsonl's ``*_s`` fields: train, collaborate,
fetch, evaluate, over clients and rounds) into ``step_s``, to show where the time goes.

It checks what the job shows: every method's Test acc cell of ``results.md`` must equal the
README's quickstart table, and every per-client figure of every round (each method's
metrics.jsonl without its timings, the ``*_s`` fields) must be identical to the baseline's.
It exits non-zero when either differs.

Run: python benchmarks/main_job.py [--baseline REV] [--repeat N] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, export_tree, format_table, median, write_results
from readme_table import machine, recorded

CONFIG = "examples/quickstart.toml"
README = REPO_ROOT / "README.md"


def readme_accuracies() -> dict[str, str]:
    """The Test acc cell of each method in the README's quickstart table."""
    section = README.read_text().split("## The quickstart's results", 1)[1]
    return dict(re.findall(r"^\| (\w+) \| ([\d.]+ ± [\d.]+) \|", section, flags=re.MULTILINE))


def run_accuracies(out: Path) -> dict[str, str]:
    """The Test acc cell of each method in a run's results.md."""
    text = (out / "results.md").read_text()
    return dict(re.findall(r"^\| (\w+) \| ([\d.]+ ± [\d.]+) \|", text, flags=re.MULTILINE))


def client_figures(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every method's per-client, per-round metrics, without the timings and the metrics a
    method does not report (written as null before metrics.jsonl left them out)."""
    figures = {}
    for rows in sorted(out.glob("*/metrics.jsonl")):
        parsed = [json.loads(line) for line in rows.read_text().splitlines() if line]
        figures[rows.parent.name] = [
            {k: v for k, v in row.items() if not k.endswith("_s") and v is not None}
            for row in parsed
        ]
    return figures


def step_seconds(out: Path) -> dict[str, dict[str, float]]:
    """Where each method's time went: its clients' step timings (train_s, collaborate_s,
    fetch_s, evaluate_s, ...) summed over clients and rounds; ``round_s``, the same on every
    client's row, once per round."""
    seconds: dict[str, dict[str, float]] = {}
    for method, rows in client_timings(out).items():
        sums: dict[str, float] = {}
        rounds: dict[int, float] = {}
        for row in rows:
            for key, value in row.items():
                if key == "round_s":
                    rounds[row["round"]] = value
                elif key.endswith("_s") and value is not None:
                    sums[key] = sums.get(key, 0.0) + value
        seconds[method] = {**sums, "round_s": sum(rounds.values())}
    return seconds


def client_timings(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every method's metrics.jsonl rows, as written."""
    return {
        rows.parent.name: [json.loads(line) for line in rows.read_text().splitlines() if line]
        for rows in sorted(out.glob("*/metrics.jsonl"))
    }


def run_job(out: Path, extra: list[str], pythonpath: Path | None) -> dict[str, Any]:
    """One timed run of the command; its wall and CPU seconds and per-method seconds. A
    baseline (``pythonpath``: its export) runs its own examples/quickstart.toml: an older
    tree refuses the keys a newer config spells out."""
    collabfl = Path(sys.executable).parent / "collabfl"
    config = CONFIG if pythonpath is None else str(pythonpath / CONFIG)
    command = [str(collabfl), "compare", config, "--out", str(out), *extra]
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": str(pythonpath)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{' '.join(command)} failed with exit code {done.returncode}")
    summaries = json.loads((out / "summary.json").read_text())
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "method_s": {s["method"]: s["wall_time_s"] for s in summaries},
        "step_s": step_seconds(out),
    }


def print_step_seconds(step_s: dict[str, dict[str, float]]) -> None:
    """The last run of this tree: each method's seconds by step, summed over clients."""
    steps = ["train_s", "collaborate_s", "fetch_s", "evaluate_s", "round_s"]
    rows = [
        [method, *(f"{seconds.get(step, 0.0):.1f}" for step in steps)]
        for method, seconds in step_s.items()
    ]
    print(format_table(["method (this tree, last run)", *steps], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="git revision to compare against (none: time only)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of each side")
    parser.add_argument(
        "--set", action="append", default=[], help="config override (not the README's job)"
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    extra = [a for kv in args.set for a in ("--set", kv)]
    sides = ["new", "baseline"] if args.baseline else ["new"]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    problems: list[str] = []
    expected = readme_accuracies() if not args.set else {}
    if expected and (named := recorded(README.read_text())[1]) != machine():
        print(f"the README's table was printed on {named}: its accuracies are checked there only")
        expected = {}
    with tempfile.TemporaryDirectory(prefix="collabfl-main-job-") as tmp:
        root = Path(tmp)
        old_code = None
        if args.baseline:
            old_code = export_tree(args.baseline, root / "baseline")
        for rep in range(args.repeat):
            outs: dict[str, Path] = {}
            for side in sides if rep % 2 == 0 else sides[::-1]:
                outs[side] = root / f"{side}-{rep}"
                result = run_job(outs[side], extra, old_code if side == "baseline" else None)
                runs[side].append(result)
                print(
                    f"  run {rep + 1}/{args.repeat} {side}: {result['wall_s']:.1f} s wall, "
                    f"{result['cpu_s']:.1f} s CPU",
                    flush=True,
                )
                shown = run_accuracies(outs[side])
                for method, cell in expected.items():
                    if shown.get(method) != cell:
                        got = shown.get(method)
                        problems.append(f"{side}: {method} shows {got}, README {cell}")
            if args.baseline and client_figures(outs["new"]) != client_figures(outs["baseline"]):
                problems.append(f"run {rep + 1}: per-client figures differ from the baseline")

    rows = []
    for side in sides:
        rows.append(
            [
                side,
                f"{median([r['wall_s'] for r in runs[side]]):.1f}",
                f"{median([r['cpu_s'] for r in runs[side]]):.1f}",
                *(
                    f"{median([r['method_s'][m] for r in runs[side]]):.1f}"
                    for m in runs["new"][0]["method_s"]
                ),
            ]
        )
    methods = list(runs["new"][0]["method_s"])
    print()
    print(format_table(["code", "wall s", "CPU s", *(f"{m} s" for m in methods)], rows))
    print()
    print_step_seconds(runs["new"][-1]["step_s"])
    figures: dict[str, Any] = {"runs": runs}
    for side in sides:
        figures[f"{side}_median_wall_s"] = median([r["wall_s"] for r in runs[side]])
        figures[f"{side}_median_cpu_s"] = median([r["cpu_s"] for r in runs[side]])
    if args.baseline:
        figures["wall_ratio"] = figures["new_median_wall_s"] / figures["baseline_median_wall_s"]
        figures["cpu_ratio"] = figures["new_median_cpu_s"] / figures["baseline_median_cpu_s"]
        print(f"new / baseline: wall {figures['wall_ratio']:.2f}, CPU {figures['cpu_ratio']:.2f}")
    figures["problems"] = problems
    settings = {"baseline": args.baseline, "repeat": args.repeat, "set": args.set}
    path = write_results("main_job-set" if args.set else "main_job", figures, settings)
    print(f"wrote {path}")
    if problems:
        raise SystemExit("results differ:\n  " + "\n  ".join(problems))
    checked = []
    if expected:
        checked.append("README table reproduced")
    if args.baseline:
        checked.append("per-client figures identical")
    print("results: " + (", ".join(checked) or "not compared"))


if __name__ == "__main__":
    main()
