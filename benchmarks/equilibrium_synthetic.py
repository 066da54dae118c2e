"""Collaboration equilibrium with SPO on the paper's synthetic linear regression (Table 1).

Two settings of tests/support/synthetic.py: (ρ = 0.1, n = 2000), where the paper finds the
coalitions {0,1,2} and {3,4,5}, and (ρ = 1.0, n = 20000), where every client stays alone.
For each seed, ``collaboration_equilibrium`` runs with ``spo_estimator`` (default
SpoSettings, or with ``--spo official`` the official code's search and hypernetwork,
``SpoSettings.official()``; in-memory linear-regression oracle) and the table gives the
coalitions, whether they are the paper's, the wall and process CPU seconds of the whole
equilibrium, the oracle calls (each one covers every client of the current set) and the
equilibrium's iterations.

For reference it also gives the exhaustive answer, the paper's "true benefit graph": every
subset's pooled least-squares model, scored by each client's exact expected loss under its own
distribution, then the exact OCS and the same equilibrium. At the default label noise
(σ = 0.01, the official code's) this leaves every client alone in both settings; ``--noise``
changes σ (pooling pays roughly when σ ≳ 3 at n = 2000, ρ = 0.1).

Run: python benchmarks/equilibrium_synthetic.py [--seeds 0,1,2] [--noise 0.01] [--spo official]
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from _common import Stopwatch, format_table, write_results

from collabfl.strategies.equilibrium import collaboration_equilibrium
from collabfl.strategies.spo import SpoSettings, spo_estimator
from tests.support.equilibrium_reference import ocs_from_utility
from tests.support.spo_oracles import linear_regression_oracle
from tests.support.synthetic import DEFAULT_NOISE, SyntheticRegression, make_synthetic_regression

SPO_VARIANTS = {"ours": SpoSettings(), "official": SpoSettings.official()}
"""The SPO settings a run can use: our defaults, or the official code's choices."""

SETTINGS = (
    (0.1, 2000, [[0, 1, 2], [3, 4, 5]]),
    (1.0, 20000, [[c] for c in range(6)]),
)
"""(ρ, n, the paper's equilibrium) from Table 1."""


def as_lists(partition: list[frozenset[int]]) -> list[list[int]]:
    return [sorted(c) for c in partition]


def show(partition: list[list[int]]) -> str:
    return " ".join("{" + ",".join(map(str, c)) + "}" for c in partition)


def exhaustive(data: SyntheticRegression) -> list[list[int]]:
    """The equilibrium from exact OCS: pooled least squares per subset, exact expected loss."""
    fits: dict[frozenset[int], np.ndarray] = {}

    def utility(i: int, subset: frozenset[int]) -> float:
        if subset not in fits:
            x = np.vstack([data.train[j].x for j in sorted(subset)]).astype(np.float64)
            y = np.concatenate([data.train[j].y for j in sorted(subset)]).astype(np.float64)
            design = np.c_[x, np.ones(len(x))]
            fits[subset] = np.linalg.lstsq(design, y, rcond=None)[0]
        w = fits[subset]
        # x ~ U[-1, 1]^dim has covariance I/3 and mean 0.
        return -(np.sum((w[:-1] - data.weights[i]) ** 2) / 3 + w[-1] ** 2 + data.noise**2)

    return as_lists(collaboration_equilibrium(range(data.num_clients), ocs_from_utility(utility)))


def run(rho: float, samples: int, seed: int, noise: float, settings: SpoSettings) -> dict:
    data = make_synthetic_regression(rho, samples, seed=seed, noise=noise)
    clients = range(data.num_clients)
    oracle = linear_regression_oracle({c: data.client_arrays(c) for c in clients})
    estimate = spo_estimator(oracle, data.dim + 1, settings, seed)
    sets: list[int] = []

    def counting(clients: frozenset[int]):
        sets.append(len(clients))
        return estimate(clients)

    with Stopwatch() as watch:
        partition = collaboration_equilibrium(clients, counting)
    return {
        "rho": rho,
        "samples": samples,
        "seed": seed,
        "coalitions": as_lists(partition),
        "wall_seconds": watch.wall,
        "cpu_seconds": watch.cpu,
        "oracle_calls": oracle.calls,
        "iterations": len(sets),
        "set_sizes": sets,
        "exhaustive": exhaustive(data),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--noise", type=float, default=DEFAULT_NOISE, help="label noise σ")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--spo", choices=sorted(SPO_VARIANTS), default="ours")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    torch.set_num_threads(args.threads)
    settings = SPO_VARIANTS[args.spo]

    rows: list[dict[str, Any]] = []
    for rho, samples, paper in SETTINGS:
        for seed in seeds:
            row = run(rho, samples, seed, args.noise, settings)
            row["paper"] = paper
            row["matches_paper"] = row["coalitions"] == paper
            rows.append(row)
            print(f"rho={rho} n={samples} seed={seed}: {show(row['coalitions'])}", flush=True)

    print(f"\nSPO ({args.spo}) collaboration equilibrium, synthetic regression, σ = {args.noise}")
    print(
        format_table(
            [
                "setting",
                "seed",
                "SPO coalitions",
                "= paper",
                "wall s",
                "cpu s",
                "oracle calls",
                "iters",
                "exhaustive",
            ],
            [
                [
                    f"ρ={r['rho']}, n={r['samples']}",
                    r["seed"],
                    show(r["coalitions"]),
                    "yes" if r["matches_paper"] else "no",
                    f"{r['wall_seconds']:.1f}",
                    f"{r['cpu_seconds']:.1f}",
                    r["oracle_calls"],
                    r["iterations"],
                    show(r["exhaustive"]),
                ]
                for r in rows
            ],
        )
    )
    name = "equilibrium_synthetic"
    if args.noise != DEFAULT_NOISE:
        name += f"-noise{args.noise:g}"
    if args.spo != "ours":
        name += f"-{args.spo}"
    path = write_results(
        name,
        {
            "runs": rows,
            "matches_paper": sum(r["matches_paper"] for r in rows),
            "runs_total": len(rows),
        },
        {"seeds": seeds, "noise": args.noise, "threads": args.threads, "spo": asdict(settings)},
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
