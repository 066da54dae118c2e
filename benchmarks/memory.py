"""Peak memory of a paper-scale DPFL run, and peak peer models held against the budget Bc.

Each configuration runs in a fresh Python subprocess (this script with ``--child``), so the
peak resident set size (VmHWM from /proc/self/status, which the child prints when it is
done) belongs to that configuration alone. The child runs DPFL through the product path,
``coordinator.experiment.run_comparison``, on N MNIST-1D clients for a few rounds, then
reads ``peak_peer_models`` back from the run's metrics.jsonl (per round) and summary.json.

Two reference children give context: "import" (python + torch + collabfl imported, nothing
run) and "local" (the same federation, local training only: no peer models at all).

A model of the MNIST-1D CNN is 108 KiB, so even Bc = N − 1 = 99 resident peers add only
about 11 MiB over "local"; differences of ±15 MiB between configurations are allocator and
import noise (matplotlib, rich), not peer models.

Check: the peak number of peer models a client held at once must never exceed Bc (N − 1
when unlimited). A violation prints a FAIL line; the JSON is written either way.

Run: python benchmarks/memory.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import format_table, write_results

RESULT_PREFIX = "MEMORY-RESULT "


def proc_status_kib(field: str) -> int | None:
    """A ``VmXXX:   123 kB`` field of /proc/self/status in KiB (None where unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def memory_record() -> dict[str, Any]:
    return {
        "vm_hwm_kib": proc_status_kib("VmHWM"),
        "vm_rss_kib": proc_status_kib("VmRSS"),
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one configuration in this (fresh) process and report its memory and peaks."""
    import torch  # noqa: F401  (imported for the "import" reference even when nothing runs)

    from collabfl.engine.config import load_config
    from collabfl.engine.experiment import run_comparison
    from collabfl.engine.methods import parse_method_spec

    if spec["method"] == "import":
        return {**memory_record(), "wall_s": 0.0}
    from rich.console import Console

    overrides = [
        f"data.num_clients={spec['clients']}",
        f"rounds={spec['rounds']}",
        f"epochs={spec['epochs']}",
        f"dpfl.init_epochs={spec['init_epochs']}",
        f"seed={spec['seed']}",
        f"threads={spec['threads']}",
    ]
    config = load_config(None, overrides)
    method = parse_method_spec(spec["method"], config)
    with tempfile.TemporaryDirectory(prefix="collabfl-memory-") as tmp:
        out = Path(tmp)
        started = time.perf_counter()
        run_comparison(config, [method], out, Console(quiet=True))
        wall = time.perf_counter() - started
        run_dir = next(p for p in out.iterdir() if (p / "summary.json").exists())
        summary = json.loads((run_dir / "summary.json").read_text())
        per_round: dict[int, int] = {}
        with (run_dir / "metrics.jsonl").open() as rows:
            for line in rows:
                if line.strip():
                    row = json.loads(line)
                    r = int(row["round"])
                    per_round[r] = max(per_round.get(r, 0), int(row["peak_peer_models"] or 0))
    return {
        **memory_record(),
        "wall_s": wall,
        "peak_peer_models_summary": summary.get("peak_peer_models"),
        "peak_peer_models_by_round": [per_round[r] for r in sorted(per_round)],
        "budget_resolved": summary.get("budget"),
        "mean_test_acc": summary.get("mean_test_acc"),
        "bytes_fetched_total": summary.get("bytes_fetched_total"),
        "model_bytes": summary.get("model_bytes"),
    }


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Start this script with ``--child`` in a fresh interpreter and parse its report."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"child {spec['method']} failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(RESULT_PREFIX) :])


def mib(kib: int | None) -> str:
    return "?" if kib is None else f"{kib / 1024:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100, help="federation size N")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (round 0 = preprocessing)")
    parser.add_argument("--epochs", type=float, default=1.0, help="local epochs per round")
    parser.add_argument("--init-epochs", type=float, default=2.0, help="DPFL τ_init")
    parser.add_argument("--budgets", default="1,5,10,20,inf", help="Bc values (comma separated)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the children")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 12 clients, 2 rounds")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(RESULT_PREFIX + json.dumps(child(json.loads(args.child))), flush=True)
        return
    if args.quick:
        args.clients, args.rounds = 12, 2
    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    base = {
        "clients": args.clients,
        "rounds": args.rounds,
        "epochs": args.epochs,
        "init_epochs": args.init_epochs,
        "seed": args.seed,
        "threads": args.threads,
    }
    methods = ["import", "local", *(f"dpfl:budget={b}" for b in budgets)]
    print(
        f"N={args.clients} MNIST-1D clients, {args.rounds} rounds, {args.epochs:g} epoch(s), "
        f"τ_init {args.init_epochs:g}; one fresh subprocess per configuration"
    )
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    for method in methods:
        report = run_child({**base, "method": method})
        limit = None
        if method.startswith("dpfl"):
            raw = method.split("=", 1)[1]
            limit = args.clients - 1 if raw == "inf" else int(raw)
            peak = int(report["peak_peer_models_summary"])
            peak = max([peak, *report["peak_peer_models_by_round"]])
            report["budget_limit"] = limit
            report["within_budget"] = peak <= limit
            if peak > limit:
                failures.append(f"FAIL: {method} held {peak} peer models at once (Bc = {limit})")
        results.append({"method": method, **report})
        print(f"  {method:<18} done in {report['wall_s']:.1f} s", flush=True)

    reference = next(r["vm_hwm_kib"] for r in results if r["method"] == "local")
    rows = []
    for r in results:
        delta = "" if r["method"] == "import" else f"{(r['vm_hwm_kib'] - reference) / 1024:+.1f}"
        peaks = r.get("peak_peer_models_by_round")
        rows.append(
            [
                r["method"],
                mib(r["vm_hwm_kib"]),
                delta,
                "" if r.get("budget_limit") is None else str(r["budget_limit"]),
                "" if peaks is None else str(max(peaks, default=0)),
                "" if peaks is None else " ".join(str(p) for p in peaks),
                {True: "ok", False: "FAIL", None: ""}[r.get("within_budget")],
                f"{r['wall_s']:.1f}",
            ]
        )
    headers = ["config", "peak RSS MiB", "Δ vs local MiB", "Bc", "peak peers"]
    print()
    print(format_table([*headers, "by round", "check", "run s"], rows))
    for line in failures:
        print(line)
    if not failures:
        print("peak peer models within Bc in every configuration")
    settings = {**base, "budgets": budgets, "quick": args.quick, "peak_rss_source": "VmHWM"}
    figures = {"configs": results, "failures": failures}
    path = write_results("memory-quick" if args.quick else "memory", figures, settings)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
