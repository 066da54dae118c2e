"""Why do benign DPFL clients keep edges to label-flip attackers? Round by round, by variant.

    python benchmarks/label_flip_edges.py [--variants default,bc0.2] [--seeds 1] [--rounds 60]

The reproduction report's label-flip setting (MNIST-1D, N = 50, Dir(0.1), 40% of the clients
with labels flipped by one shared permutation) runs DPFL in process once per (variant, seed).
From each round's collaboration graph it measures, over benign clients: the share of their
edge weight on attackers (the report's figure), the share of their edges (by count) that
point to attackers, and how many benign clients have at least one such edge. A benign client
choosing its peers at random would put 20/49 ≈ 41% of its edges on attackers.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import Stopwatch, format_table, write_results

SETTING = ("data.partition=dirichlet", "data.alpha=0.1", "data.label_flip_fraction=0.4")
VARIANTS: dict[str, tuple[str, ...]] = {
    "default": ("dpfl.budget=0.1",),
    "bc0.05": ("dpfl.budget=0.05",),
    "bc0.2": ("dpfl.budget=0.2",),
    "bc-inf": ("dpfl.budget=inf",),
    "paper": ("preset=paper", "dpfl.budget=0.1"),
    "tie-larger": ("dpfl.budget=0.1", "dpfl.ggc_tie=larger"),
}
"""DPFL knobs per variant; "paper": the official periodicity (GGC and averaging every second
round) and the budget counting the owner; "tie-larger": GGC adds a peer whose gains are both
non-positive only when its add gain is the larger (dpfl.ggc_tie)."""


def edge_shares(matrix: np.ndarray, malicious: np.ndarray) -> dict[str, float]:
    """Benign rows of one graph: weight share, edge share and clients touching attackers."""
    off = ~np.eye(matrix.shape[0], dtype=bool)
    benign = np.where(off, matrix, 0.0)[~malicious]
    edges = benign > 0
    weight = benign.sum()
    count = edges.sum()
    return {
        "weight_share": float(benign[:, malicious].sum() / weight) if weight > 0 else 0.0,
        "edge_share": float(edges[:, malicious].sum() / count) if count > 0 else 0.0,
        "benign_with_attacker": float(edges[:, malicious].any(axis=1).mean()),
        "benign_out_degree": float(edges.sum(axis=1).mean()),
    }


def label_overlap(
    matrix: np.ndarray, malicious: np.ndarray, val_labels: list[set[int]], labels: list[set[int]]
) -> dict[str, float]:
    """Of the benign → attacker edges, the share whose attacker trains on a label (as it sees
    it) that the benign client validates on, beside that share over all benign-attacker
    pairs: an attacker with no such label cannot hurt the client's validation accuracy."""
    benign = [i for i in range(len(matrix)) if not malicious[i]]
    attackers = [j for j in range(len(matrix)) if malicious[j]]
    pairs = [(i, j) for i in benign for j in attackers]
    edges = [(i, j) for i, j in pairs if matrix[i, j] > 0]

    def share(among: list[tuple[int, int]]) -> float:
        hits = sum(bool(val_labels[i] & labels[j]) for i, j in among)
        return hits / len(among) if among else float("nan")

    return {"overlap_of_edges": share(edges), "overlap_of_pairs": share(pairs)}


def run(variant: str, seed: int, clients: int, rounds: int, folder: Path) -> dict[str, Any]:
    from rich.console import Console

    from collabfl.engine.config import load_config
    from collabfl.engine.experiment import prepare_data, run_comparison
    from collabfl.engine.methods import parse_method_spec
    from collabfl.engine.recording import safe_name
    from collabfl.engine.report.run_dir import read_run

    overrides = [
        f"data.num_clients={clients}",
        f"rounds={rounds}",
        *SETTING,
        *VARIANTS[variant],
        f"seed={seed}",
        "threads=1",
        "jobs=1",
    ]
    config = load_config(None, overrides)
    spec = parse_method_spec("dpfl", config)
    with Stopwatch() as watch:
        (summary,) = run_comparison(config, [spec], folder, Console(quiet=True))
    records = read_run(folder / safe_name(spec.label))
    malicious = np.zeros(clients, dtype=bool)
    malicious[[int(r["client"]) for r in records.rows if r.get("malicious")]] = True
    by_round = {r: edge_shares(m, malicious) for r, m in sorted(records.graphs.items())}
    data = prepare_data(config).clients
    val_labels = [{int(y) for y in c.val.y} for c in data]
    labels = [{int(y) for y in c.train.y} for c in data]
    last = records.graphs[max(records.graphs)]
    return {
        "variant": variant,
        "seed": seed,
        "overrides": overrides,
        "by_round": by_round,
        "label_overlap_last": label_overlap(last, malicious, val_labels, labels),
        "mean_test_acc": summary["mean_test_acc"],
        "summary_weight_share_last": summary["benign_edges_to_malicious_last"],
        "wall_seconds": watch.wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="default", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--name", default="label_flip_edges", help="results file name")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    torch.set_num_threads(1)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants:
            for seed in seeds:
                result = run(
                    variant, seed, args.clients, args.rounds, Path(tmp) / variant / str(seed)
                )
                runs.append(result)
                last = result["by_round"][max(result["by_round"])]
                overlap = result["label_overlap_last"]
                print(f"{variant} s{seed}: last graph {last}, {overlap}", flush=True)
    table = []
    for result in runs:
        series = result["by_round"]
        for r in sorted(series):
            if r % 5 == 4 or r == min(series) or r == max(series):
                s = series[r]
                table.append(
                    [
                        result["variant"],
                        result["seed"],
                        r,
                        f"{100 * s['weight_share']:.1f}",
                        f"{100 * s['edge_share']:.1f}",
                        f"{100 * s['benign_with_attacker']:.0f}",
                        f"{s['benign_out_degree']:.1f}",
                    ]
                )
    headers = ["variant", "seed", "round", "weight %", "edges %", "benign w/ attacker %", "deg"]
    print(format_table(headers, table))
    settings = {"clients": args.clients, "rounds": args.rounds, "seeds": seeds}
    print(f"wrote {write_results(args.name, {'runs': runs}, settings)}")


if __name__ == "__main__":
    main()
