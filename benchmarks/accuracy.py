"""The accuracy table of the foundation issue: DPFL against the baselines on MNIST-1D.

For every (partition, seed) the methods run on the same federation through
``coordinator.experiment.run_comparison`` (method specs parsed by
``coordinator.methods.parse_method_spec``). Each cell of the table is the mean ± standard
deviation over seeds (sample std, ddof = 1) of a run summary's ``mean_test_acc`` (mean over
clients of the test accuracy of each client's best-validation model, in %) or
``var_test_acc`` (its variance across clients, in %²).

Partitions: Dir(0.1) (data.partition=dirichlet, data.alpha=0.1) and Patho(3)
(data.partition=pathological, data.classes_per_client=3). Run directories go to
benchmarks/results/runs-accuracy-<timestamp>/ (git-ignored); the table goes to
benchmarks/results/accuracy.md and the figures to benchmarks/results/accuracy.json.

Default settings (30 rounds, τ_train = 1 epoch, τ_init = 5 epochs) were chosen so that the
full run, 2 partitions × 3 seeds × 10 methods at N = 50, takes about 30 minutes on 2 cores
with ``--jobs 2``. Calibration (one Dir(0.1) federation, all 10 methods in one process, one
torch thread, CPU time): 96 s at 4 rounds and 153 s at 8 rounds, i.e. about 38 s fixed
(DPFL's τ_init, FedAvg+FT's fine-tuning, set-up) plus 14 s per round; the slowest methods
are DPFL Bc = ∞ (≈ 4 s/round) and Ditto (two trainings per round). Each worker runs 3 of
the 6 combinations: 3 × (43 + 14 × 30) s ≈ 23 min of CPU each, ≈ 26 min of wall time with
both cores busy, more on a machine shared with other work.

Run: python benchmarks/accuracy.py [--jobs 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from datetime import datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, command_line, format_table, write_results

METHODS = (
    "local",
    "fedavg",
    "fedavg_ft",
    "fedprox",
    "ditto",
    "dpfl:budget=inf",
    "dpfl:budget=0.2",
    "dpfl:budget=0.1",
    "dpfl:budget=0.05",
    "dpfl_random:budget=0.1",
)
PARTITIONS: dict[str, tuple[str, ...]] = {
    "Dir(0.1)": ("data.partition=dirichlet", "data.alpha=0.1"),
    "Patho(3)": ("data.partition=pathological", "data.classes_per_client=3"),
}
PARTITION_KEYS = {"dir": "Dir(0.1)", "patho": "Patho(3)"}

# Chosen from measured single-method times at N = 50 (see the module docstring).
DEFAULT_ROUNDS = 30
DEFAULT_EPOCHS = 1.0
DEFAULT_INIT_EPOCHS = 5.0


@dataclass(frozen=True)
class Job:
    """One (partition, seed) combination: every method on the same federation."""

    partition: str
    seed: int
    overrides: tuple[str, ...]
    methods: tuple[str, ...]
    out_dir: str
    quiet: bool


def run_job(job: Job) -> dict[str, Any]:
    """Run one combination (in a worker process with one torch thread); never raises."""
    import torch
    from rich.console import Console

    from collabfl.coordinator.config import load_config
    from collabfl.coordinator.experiment import run_comparison
    from collabfl.coordinator.methods import parse_method_spec

    torch.set_num_threads(1)
    started = time.perf_counter()
    try:
        config = load_config(None, [*job.overrides, f"seed={job.seed}", "threads=1"])
        specs = [parse_method_spec(m, config) for m in job.methods]
        console = Console(quiet=True) if job.quiet else Console()
        summaries = run_comparison(config, specs, Path(job.out_dir), console)
        error = None
    except Exception:
        summaries, error = [], traceback.format_exc()
    return {
        **asdict(job),
        "wall_s": time.perf_counter() - started,
        "summaries": summaries,
        "error": error,
    }


def spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def aggregate(
    results: list[dict[str, Any]], partitions: list[str], methods: list[str]
) -> list[dict[str, Any]]:
    """Per (partition, method): mean ± std over seeds of accuracy (%) and variance (%²)."""
    cells = []
    for partition in partitions:
        for method in methods:
            runs = [
                (r["seed"], s)
                for r in results
                if r["partition"] == partition
                for s in r["summaries"]
                if s["method"] == method and s.get("mean_test_acc") is not None
            ]
            if not runs:
                continue
            acc = [100 * s["mean_test_acc"] for _, s in runs]
            var = [100**2 * s["var_test_acc"] for _, s in runs]
            wall = [s["wall_time_s"] for _, s in runs]
            acc_mean, acc_std = spread(acc)
            var_mean, var_std = spread(var)
            cells.append(
                {
                    "partition": partition,
                    "method": method,
                    "seeds": [seed for seed, _ in runs],
                    "acc_pct": acc,
                    "var_pct2": var,
                    "acc_mean": acc_mean,
                    "acc_std": acc_std,
                    "var_mean": var_mean,
                    "var_std": var_std,
                    "budget": runs[0][1].get("budget"),
                    "wall_time_s_mean": statistics.fmean(wall),
                }
            )
    return cells


def markdown(
    cells: list[dict[str, Any]],
    partitions: list[str],
    methods: list[str],
    notes: list[str],
) -> str:
    """The accuracy table: one row per method, accuracy and variance per partition."""
    by_key = {(c["partition"], c["method"]): c for c in cells}
    header = ["Method"]
    for p in partitions:
        header += [f"{p} acc (%)", f"{p} var (%²)"]
    header.append("Time/run (s)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in methods:
        row = [f"`{method}`"]
        times = []
        for p in partitions:
            c = by_key.get((p, method))
            if c is None:
                row += ["—", "—"]
                continue
            row += [
                f"{c['acc_mean']:.2f} ± {c['acc_std']:.2f}",
                f"{c['var_mean']:.1f} ± {c['var_std']:.1f}",
            ]
            times.append(c["wall_time_s_mean"])
        row.append(f"{statistics.fmean(times):.0f}" if times else "—")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(["# Accuracy on MNIST-1D", "", *notes, "", *lines, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50, help="federation size N")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument(
        "--partitions", default="dir,patho", help="comma-separated: dir (Dir(0.1)), patho"
    )
    parser.add_argument(
        "--methods", default=";".join(METHODS), help="semicolon-separated method specs"
    )
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--epochs", type=float, default=DEFAULT_EPOCHS, help="τ_train")
    parser.add_argument("--init-epochs", type=float, default=DEFAULT_INIT_EPOCHS, help="τ_init")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="worker processes (1 thread each)",
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], help="extra config override"
    )
    parser.add_argument("--out", type=Path, help="run directories (default: results/runs-…)")
    parser.add_argument(
        "--name", help="results file stem (default: accuracy, or accuracy-quick with --quick)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 seed, 10 clients, 5 rounds"
    )
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.clients, args.rounds = "0", 10, 5
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    partitions = [PARTITION_KEYS[p.strip()] for p in args.partitions.split(",") if p.strip()]
    methods = [m.strip() for m in args.methods.split(";") if m.strip()]
    base = (
        f"data.num_clients={args.clients}",
        f"rounds={args.rounds}",
        f"epochs={args.epochs}",
        f"dpfl.init_epochs={args.init_epochs}",
        *args.overrides,
    )

    from collabfl.coordinator.config import load_config
    from collabfl.coordinator.methods import parse_method_spec

    for partition in partitions:  # fail on a bad spec or override before anything runs
        config = load_config(None, [*base, *PARTITIONS[partition]])
        for method in methods:
            parse_method_spec(method, config)

    name = args.name or ("accuracy-quick" if args.quick else "accuracy")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_root = args.out or RESULTS_DIR / f"runs-{name}-{stamp}"
    quiet = args.jobs > 1
    jobs = [
        Job(
            partition=partition,
            seed=seed,
            overrides=(*base, *PARTITIONS[partition]),
            methods=tuple(methods),
            out_dir=str(
                out_root / f"{partition.lower().replace('(', '').replace(')', '')}-s{seed}"
            ),
            quiet=quiet,
        )
        for seed in seeds
        for partition in partitions
    ]
    print(
        f"{len(jobs)} combinations × {len(methods)} methods, N={args.clients}, "
        f"{args.rounds} rounds, τ_train {args.epochs:g}, τ_init {args.init_epochs:g}, "
        f"{args.jobs} job(s); runs in {out_root}",
        flush=True,
    )
    started = time.perf_counter()
    results: list[dict[str, Any]] = []

    def report(result: dict[str, Any]) -> None:
        results.append(result)
        status = "FAILED" if result["error"] else "done"
        print(
            f"  [{len(results)}/{len(jobs)}] {result['partition']} seed {result['seed']}: "
            f"{status} in {result['wall_s']:.0f} s (elapsed {time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        if result["error"]:
            print(result["error"], flush=True)

    if args.jobs > 1:
        context = get_context("spawn")
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
            futures = [pool.submit(run_job, job) for job in jobs]
            for future in as_completed(futures):
                report(future.result())
    else:
        for job in jobs:
            report(run_job(job))
    total = time.perf_counter() - started

    cells = aggregate(results, partitions, methods)
    notes = [
        f"N = {args.clients} clients, seeds {', '.join(map(str, seeds))}, "
        f"{args.rounds} rounds, τ_train = {args.epochs:g} epoch(s), "
        f"τ_init = {args.init_epochs:g} epochs (DPFL round 0), "
        f"training {load_config(None, list(base)).training.model_dump()}.",
        "Cells: mean ± std over seeds (sample std) of the mean over clients of the test "
        "accuracy of each client's best-validation model, and of its variance across clients.",
        f"Total wall time {total / 60:.1f} min with {args.jobs} job(s) (1 torch thread each). "
        f"Command: `{command_line()}`",
    ]
    if args.overrides:
        notes.append(f"Extra overrides: {', '.join(args.overrides)}.")
    table = markdown(cells, partitions, methods, notes)
    print()
    print(table)
    failed = [r for r in results if r["error"]]
    if failed:
        print(f"{len(failed)} combination(s) failed; see the JSON for tracebacks")
    (RESULTS_DIR / f"{name}.md").write_text(table)
    settings = {
        "clients": args.clients,
        "seeds": seeds,
        "partitions": {p: list(PARTITIONS[p]) for p in partitions},
        "methods": methods,
        "rounds": args.rounds,
        "epochs": args.epochs,
        "init_epochs": args.init_epochs,
        "jobs": args.jobs,
        "threads_per_job": 1,
        "overrides": list(base),
        "quick": args.quick,
        "runs_dir": str(out_root),
    }
    runs = [
        {
            "partition": r["partition"],
            "seed": r["seed"],
            "wall_s": r["wall_s"],
            "error": r["error"],
            "summaries": r["summaries"],
        }
        for r in sorted(results, key=lambda r: (r["partition"], r["seed"]))
    ]
    figures = {"table": cells, "total_wall_s": total, "runs": runs}
    path = write_results(name, figures, settings)
    timing = [
        [c["partition"], c["method"], f"{c['wall_time_s_mean']:.1f}"]
        for c in cells
        if c["partition"] == partitions[0]
    ]
    print(format_table(["partition", "method", "s per run"], timing))
    print(f"\nwrote {path} and {RESULTS_DIR / (name + '.md')}")


if __name__ == "__main__":
    main()
