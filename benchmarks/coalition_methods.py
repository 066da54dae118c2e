"""Coalition methods on MNIST-1D label-shift groups, and what estimating distances costs.

    python benchmarks/coalition_methods.py [--seeds 0,1,2] [--clients 20] [--rounds 20]

Table: Local, FedAvg, FedAvg inside FedCollab coalitions, FedAvg inside equilibrium
coalitions and DPFL on the ``label_groups`` partition (two groups of large clients, two of
small ones): accuracy, IPR (share of clients whose accuracy beats their local model's) and
RSD (standard deviation over clients of the gain over local), the FedCollab paper's Eq. 11-12,
per seed then mean ± std over seeds. Cost: one federated distance estimation over all
N(N-1)/2 pairs on seed 0 (steps = messages per client, discriminator bytes both ways).

Writes results/coalition_methods.{json,md}; run directories go to results/runs-coalition-*/.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from _common import RESULTS_DIR, write_results
from rich.console import Console

from collabfl.client.node import ClientSplits
from collabfl.engine.builders import distance_settings
from collabfl.engine.config import load_config, model_name
from collabfl.engine.experiment import prepare_data, run_comparison
from collabfl.engine.inprocess import build_federation
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.report.run_dir import read_run
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.strategies.distances import all_pairs, estimate_distances

METHODS = ["local", "fedavg", "fedcollab", "equilibrium", "dpfl"]


def final_accuracies(run_dir: Path) -> dict[int, float]:
    """Each client's best-validation model's test accuracy at the last round."""
    rows = read_run(run_dir).rows
    last = max(r["round"] for r in rows)
    return {r["client"]: r["best_test_acc"] for r in rows if r["round"] == last}


def ipr_rsd(method: dict[int, float], local: dict[int, float]) -> tuple[float, float]:
    gains = [method[k] - local[k] for k in sorted(local) if k in method]
    return float(np.mean([g > 0 for g in gains])), float(np.std(gains))


def cell(values: list[float], scale: float = 100.0) -> str:
    mean = statistics.fmean(values) * scale
    spread = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {spread:.2f}"


def distance_cost(overrides: list[str]) -> dict:
    """One estimation over every pair, timed, with its D̂ summarised by client group."""
    config = load_config(None, overrides)
    data = prepare_data(config)
    splits = [ClientSplits.from_data(c, torch.device("cpu")) for c in data.clients]
    workspace = FlatModel(build_model(model_name(config), data.pool.num_classes, config.seed))
    federation = build_federation(splits, workspace, config.training, config.seed)
    settings = distance_settings(config.fedcollab)
    clients = sorted(federation.sample_counts)
    started = time.perf_counter()
    estimate = estimate_distances(federation, all_pairs(clients), settings, 0)
    wall = time.perf_counter() - started
    groups = data.partition.meta["groups"]
    matrix = estimate.matrix(clients)
    by_level: dict[str, list[float]] = {}
    for i in clients:
        for j in clients:
            if i < j:
                gi, gj = groups[i], groups[j]
                level = "same group" if gi == gj else f"groups {min(gi, gj)}-{max(gi, gj)}"
                by_level.setdefault(level, []).append(float(matrix[i, j]))
    return {
        "clients": len(clients),
        "pairs": len(all_pairs(clients)),
        "steps": estimate.steps,
        "model_bytes": estimate.model_bytes,
        "wall_s": wall,
        "mean_distance_by_level": {k: statistics.fmean(v) for k, v in sorted(by_level.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs_dir = RESULTS_DIR / f"runs-coalition-{time.strftime('%Y%m%d-%H%M%S')}"
    base = [
        f"data.num_clients={args.clients}",
        "data.partition=label_groups",
        f"rounds={args.rounds}",
        "jobs=2",
    ]
    started = time.perf_counter()
    cost = distance_cost([*base, "seed=0"])
    print(f"distance estimation, N={cost['clients']}: {cost}", flush=True)

    per_seed: dict[str, dict[str, list[float]]] = {
        m: {"acc": [], "ipr": [], "rsd": []} for m in METHODS
    }
    coalitions: dict[str, dict[int, list]] = {"fedcollab": {}, "equilibrium": {}}
    for seed in seeds:
        config = load_config(None, [*base, f"seed={seed}"])
        out = runs_dir / f"s{seed}"
        specs = [parse_method_spec(m, config) for m in METHODS]
        run_comparison(config, specs, out, Console(file=io.StringIO()))
        local = final_accuracies(out / "local")
        for method in METHODS:
            accuracy = final_accuracies(out / method)
            ipr, rsd = ipr_rsd(accuracy, local)
            per_seed[method]["acc"].append(statistics.fmean(accuracy.values()))
            per_seed[method]["ipr"].append(ipr)
            per_seed[method]["rsd"].append(rsd)
        for method in coalitions:
            found = read_run(out / method).coalitions
            coalitions[method][seed] = found[max(found)]
        print(f"seed {seed} done after {time.perf_counter() - started:.0f} s", flush=True)

    lines = [
        "# Coalition methods on MNIST-1D label-shift groups",
        "",
        f"N = {args.clients} (`label_groups`: groups 0-1 large, 2-3 small, size ratio 4), "
        f"{args.rounds} rounds, seeds {args.seeds}; mean ± std over seeds. Acc: mean client "
        "test accuracy of best-validation models; IPR: share of clients above their local "
        "model; RSD: std over clients of the gain over local (percentage points).",
        "",
        "| Method | Acc (%) | IPR (%) | RSD (pp) |",
        "|---|---|---|---|",
        *(
            f"| `{m}` | {cell(v['acc'])} | {cell(v['ipr'])} | {cell(v['rsd'])} |"
            for m, v in per_seed.items()
        ),
        "",
        "Coalitions found (last round):",
        *(f"- {m} seed {s}: {c}" for m, found in coalitions.items() for s, c in found.items()),
        "",
        f"Distance estimation, N = {cost['clients']} ({cost['pairs']} pairs, seed 0): "
        f"{cost['steps']} steps (messages per client), "
        f"{cost['model_bytes'] / 2**20:.1f} MiB of discriminators, {cost['wall_s']:.1f} s.",
        "Mean D̂ by client-group pair: "
        + ", ".join(f"{k} {v:.2f}" for k, v in cost["mean_distance_by_level"].items()),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS_DIR / "coalition_methods.md").write_text(text)
    figures = {"table": per_seed, "coalitions": coalitions, "distance_cost": cost}
    settings = {"seeds": seeds, "clients": args.clients, "rounds": args.rounds}
    settings["wall_s"] = time.perf_counter() - started
    print(write_results("coalition_methods", figures, settings))


if __name__ == "__main__":
    main()
