"""pFedGraph and iPFL next to Local, FedAvg and DPFL on MNIST-1D, and pFedGraph vs FedAvg
with 40% of the clients poisoning their uploads.

    python benchmarks/graph_methods.py [--seeds 0,1,2] [--clients 20] [--rounds 20]

Writes results/graph_methods.{json,md}; run directories go to results/runs-graph-*/.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from pathlib import Path

import numpy as np
from _common import RESULTS_DIR, write_results
from rich.console import Console

from collabfl.client.data import Partition
from collabfl.engine.config import load_config
from collabfl.engine.experiment import run_comparison
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.report.run_dir import read_run
from collabfl.strategies.ipfl import ClientProfile, utilities

TABLE_METHODS = ["local", "fedavg", "dpfl", "pfedgraph", "ipfl"]
ATTACKS = ["shuffle", "all_ones", "sign_flip", "gaussian"]


def run(overrides: list[str], methods: list[str], out: Path) -> dict[str, dict]:
    config = load_config(None, overrides)
    specs = [parse_method_spec(m, config) for m in methods]
    quiet = Console(file=io.StringIO())
    return {s["method"]: s for s in run_comparison(config, specs, out, quiet)}


def mean_cumulative_utility(run_dir: Path) -> float:
    """iPFL: the mean over clients of their utility summed over all rounds."""
    totals: dict[int, float] = {}
    for row in read_run(run_dir).rows:
        totals[row["client"]] = totals.get(row["client"], 0.0) + row["utility"]
    return statistics.fmean(totals.values())


def priced_utilities(seed_dir: Path, config) -> dict[str, float]:
    """Mean cumulative utility per client of iPFL's own market and, priced the same way
    (same profiles, iPFL's utility definition), of FedAvg's complete graph and of the graph
    pFedGraph inferred each round (i imports j when W_ij > 0). Payments cancel in the mean
    (Σ pay = 0), so the comparison needs no model distances.
    """
    partition = Partition.load(seed_dir / "partition.npz")
    profiles = [
        ClientProfile(len(split.train), config.ipfl.cost, config.ipfl.eagerness)
        for split in partition.clients
    ]
    n = len(profiles)

    def mean_total(graphs: list[np.ndarray]) -> float:
        totals = sum(utilities(a, profiles, None, 0.0, with_payments=False) for a in graphs)
        return float(np.mean(totals))

    complete = np.ones((n, n), dtype=np.int8) - np.eye(n, dtype=np.int8)
    pfedgraph = read_run(seed_dir / "pfedgraph").graphs
    return {
        "ipfl": mean_cumulative_utility(seed_dir / "ipfl"),
        "fedavg_priced": mean_total([complete] * config.rounds),
        "pfedgraph_priced": mean_total([(w > 0).astype(np.int8) for w in pfedgraph.values()]),
    }


def cell(values: list[float], scale: float = 100.0) -> str:
    """mean ± sample std, scaled (accuracies are shown in percent)."""
    mean = statistics.fmean(values) * scale
    spread = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {spread:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fraction", type=float, default=0.4, help="share of attackers")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs_dir = RESULTS_DIR / f"runs-graph-{time.strftime('%Y%m%d-%H%M%S')}"
    base = [f"data.num_clients={args.clients}", f"rounds={args.rounds}", "jobs=2"]
    started = time.perf_counter()

    table: dict[str, list[float]] = {m: [] for m in TABLE_METHODS}
    utility: dict[str, list[float]] = {}
    for seed in seeds:
        out = runs_dir / f"table-s{seed}"
        found = run([*base, f"seed={seed}"], TABLE_METHODS, out)
        for method in TABLE_METHODS:
            table[method].append(found[method]["mean_test_acc"])
        priced = priced_utilities(out, load_config(None, [*base, f"seed={seed}"]))
        for key, value in priced.items():
            utility.setdefault(key, []).append(value)

    poisoned: dict[str, dict[str, float]] = {}
    for attack in ATTACKS:
        overrides = [*base, "seed=0", f"attack.kind={attack}", f"attack.fraction={args.fraction}"]
        found = run(overrides, ["fedavg", "pfedgraph"], runs_dir / f"attack-{attack}")
        poisoned[attack] = {m: found[m]["mean_test_acc"] for m in ("fedavg", "pfedgraph")}

    lines = [
        "# pFedGraph and iPFL on MNIST-1D",
        "",
        f"N = {args.clients}, Dir(0.1), {args.rounds} rounds, seeds {args.seeds}; "
        "mean ± std over seeds of the mean client test accuracy of best-validation models.",
        "",
        "| Method | Test acc (%) |",
        "|---|---|",
        *(f"| `{m}` | {cell(v)} |" for m, v in table.items()),
        "",
        "Mean cumulative utility per client over the run (iPFL's definition, same profiles:",
        "c = 1, K = 2e4; payments cancel in the mean), mean ± std over seeds:",
        "",
        "| Graph | Utility |",
        "|---|---|",
        *(f"| {k} | {cell(vals, scale=1.0)} |" for k, vals in utility.items()),
        "",
        f"Poisoning: {args.fraction:.0%} of clients attack, seed 0; accuracy over benign clients.",
        "",
        "| Attack | FedAvg (%) | pFedGraph (%) |",
        "|---|---|---|",
        *(
            f"| {a} | {v['fedavg'] * 100:.2f} | {v['pfedgraph'] * 100:.2f} |"
            for a, v in poisoned.items()
        ),
        "",
        f"Total wall time {(time.perf_counter() - started) / 60:.1f} min. "
        "Command: `python benchmarks/graph_methods.py`",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS_DIR / "graph_methods.md").write_text(text)
    figures = {"table": table, "mean_cumulative_utility": utility, "poisoned": poisoned}
    write_results("graph_methods", figures, vars(args))


if __name__ == "__main__":
    main()
