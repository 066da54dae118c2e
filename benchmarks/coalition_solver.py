"""Coalition solvers: FedCollab's Algorithm 2 against N, and the collaboration-equilibrium loop.

a) FedCollab. ``solve_coalitions`` (all singletons, best-improvement passes in random orders,
   ``--restarts`` restarts, the official 100 by default, C = 10 as in the paper) on a random
   distance matrix with group structure: N // 10 distribution types (at least 2) with centres
   drawn in R^4, D_ij = tanh(|c_i − c_j| / 2) + N(0, 0.03²) noise (some entries fall below 0
   and get clipped, as estimated distances do), sample counts log-uniform in [50, 2000]. Wall
   time of the whole call; with ``--quick`` the largest N runs fewer restarts and the figure
   for the full count is extrapolated linearly (restarts are independent, equal work on
   average) and marked as such. Passes per run come from a separate run of ``descend``; the
   table also says whether the best partition is exactly the planted types. The machine's
   load average is recorded: timings on a shared machine move with it.
   For context, one reference at N = 20: the same algorithm re-evaluating L from scratch for
   every candidate id (the official code's way, here in NumPy), a few restarts, per run.

b) Collaboration equilibrium. ``collaboration_equilibrium`` on two synthetic instances:
   - exact OCS (enumeration of all subsets, memoised utility) with 12 clients: two rings of
     three and a pair of mutual need, the other four each needing one or two random others
     ("needs" utility: gain 1 once all needed clients are present, minus 0.01 per member);
     reports iterations and distinct utility evaluations;
   - greedy OCS (DPFL's GGC without budget) with 100 clients in 10 clusters, reward =
     −(5 · share of samples from other clusters + 1 / samples); checks that the clusters come
     out as the coalitions. (A pooled-mean bias² + variance reward is not used here: with 10
     clusters in the plane a far peer often pulls the all-client mean towards the owner, so
     neither adding it to X nor removing it from Y gains, GGC's "both zero → add" rule keeps
     it, and every OCS spans clusters.)

Run: python benchmarks/coalition_solver.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
from _common import format_table, median, write_results

from collabfl.strategies.equilibrium import collaboration_equilibrium, greedy_estimator
from collabfl.strategies.fedcollab import (
    CoalitionState,
    canonical_labels,
    coalition_objective,
    descend,
    solve_coalitions,
)
from tests.support.equilibrium_reference import ocs_from_utility


def grouped_problem(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample counts, a noisy distance matrix with N // 10 distribution types, the types."""
    rng = np.random.default_rng(seed)
    types = max(2, n // 10)
    kind = rng.integers(types, size=n)
    centres = rng.normal(size=(types, 4))
    sizes = np.round(np.exp(rng.uniform(np.log(50), np.log(2000), size=n)))
    gap = np.linalg.norm(centres[kind][:, None, :] - centres[kind][None, :, :], axis=-1)
    distances = np.tanh(gap / 2) + rng.normal(0.0, 0.03, size=(n, n))
    return sizes, distances, kind


def direct_solver(sizes, distances, c, rng, restarts, max_passes=100) -> float:
    """Algorithm 2 re-evaluating L from scratch for every candidate id; returns the best L."""
    n = len(sizes)
    best = np.inf
    for _ in range(restarts):
        labels = np.arange(n)
        for _ in range(max_passes):
            moved = False
            for x in rng.permutation(n):
                current = coalition_objective(labels, sizes, distances, c)
                used = sorted(set(labels.tolist()))
                empty = next(k for k in range(n) if k not in used) if len(used) < n else None
                candidates = [k for k in used if k != labels[x]]
                if np.sum(labels == labels[x]) > 1 and empty is not None:
                    candidates = sorted([*candidates, empty])
                values = []
                for k in candidates:
                    trial = labels.copy()
                    trial[x] = k
                    values.append(coalition_objective(trial, sizes, distances, c))
                if values and min(values) < current - 1e-12 * (1 + abs(current)):
                    labels[x] = candidates[int(np.argmin(values))]
                    moved = True
            if not moved:
                break
        best = min(best, coalition_objective(canonical_labels(labels), sizes, distances, c))
    return best


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench_fedcollab(args) -> list[dict]:
    rows = []
    for n in args.sizes:
        sizes, distances, kind = grouped_problem(n, args.seed)
        restarts = args.restarts
        if args.quick and n >= 500:
            restarts = max(1, args.restarts // 10)
        repeats = args.repeats if n < 500 else 1
        times = []
        for _ in range(repeats):
            seconds, (assignment, value) = timed(
                lambda restarts=restarts, sizes=sizes, distances=distances: solve_coalitions(
                    sizes, distances, args.c, args.seed, restarts=restarts
                )
            )
            times.append(seconds)
        seconds = median(times)
        rng = np.random.default_rng(args.seed)
        start = CoalitionState.singletons(sizes, distances, args.c)
        passes = [descend(start.copy(), rng) for _ in range(min(restarts, 20))]
        rows.append(
            {
                "clients": n,
                "restarts_measured": restarts,
                "seconds_measured": seconds,
                "seconds_for_requested_restarts": seconds * args.restarts / restarts,
                "extrapolated": restarts != args.restarts,
                "ms_per_restart": 1000 * seconds / restarts,
                "mean_passes_per_run": float(np.mean(passes)),
                "coalitions": int(assignment.max()) + 1,
                "types": max(2, n // 10),
                "recovered_types": bool(np.array_equal(assignment, canonical_labels(kind))),
                "objective": value,
                "repeats": repeats,
            }
        )
    return rows


def bench_direct_reference(args) -> dict:
    n, restarts = 20, args.reference_restarts
    sizes, distances, _ = grouped_problem(n, args.seed)
    seconds, value = timed(
        lambda: direct_solver(sizes, distances, args.c, np.random.default_rng(args.seed), restarts)
    )
    fast_seconds, (_, fast_value) = timed(
        lambda: solve_coalitions(sizes, distances, args.c, args.seed, restarts=restarts)
    )
    return {
        "clients": n,
        "restarts": restarts,
        "direct_ms_per_restart": 1000 * seconds / restarts,
        "incremental_ms_per_restart": 1000 * fast_seconds / restarts,
        "speedup": seconds / fast_seconds,
        "same_objective": bool(np.isclose(value, fast_value)),
    }


def bench_equilibrium_exact(seed: int, n: int = 12) -> dict:
    rng = np.random.default_rng(seed)
    order = [int(k) for k in rng.permutation(n)]
    needs: dict[int, set[int]] = {}
    for ring in (order[0:3], order[3:6], order[6:8]):  # rings of mutual need: 3, 3, 2
        for position, client in enumerate(ring):
            needs[client] = {ring[(position + 1) % len(ring)]}
    for client in order[8:]:  # the rest need one or two others
        others = [k for k in range(n) if k != client]
        needs[client] = {int(j) for j in rng.choice(others, size=rng.integers(1, 3))}
    evaluations = [0]

    def utility(i: int, subset: frozenset[int]) -> float:
        evaluations[0] += 1
        return (1.0 if needs[i] <= subset else 0.0) - 0.01 * len(subset)

    iterations = [0]
    estimate = ocs_from_utility(utility)

    def counting(clients):
        iterations[0] += 1
        return estimate(clients)

    seconds, partition = timed(lambda: collaboration_equilibrium(range(n), counting))
    return {
        "estimator": "exact (enumeration)",
        "clients": n,
        "seconds": seconds,
        "iterations": iterations[0],
        "coalitions": len(partition),
        "largest_coalition": max(len(c) for c in partition),
        "utility_evaluations": evaluations[0],
    }


def bench_equilibrium_greedy(seed: int, n: int = 100, clusters: int = 10) -> dict:
    rng = np.random.default_rng(seed)
    kind = np.arange(n) % clusters
    sizes = rng.integers(20, 500, size=n).astype(float)
    evaluations = [0]

    def reward(i: int, subset: frozenset[int]) -> float:
        """−(5 · share of foreign-cluster samples + 1 / samples): foreign data always hurts
        more than its volume helps, same-cluster data always helps."""
        evaluations[0] += 1
        members = np.fromiter(subset, dtype=np.int64)
        weights = sizes[members]
        foreign = weights[kind[members] != kind[i]].sum()
        return -(5.0 * foreign / weights.sum() + 1.0 / weights.sum())

    iterations = [0]
    estimate = greedy_estimator(reward, np.random.default_rng(seed))

    def counting(clients):
        iterations[0] += 1
        return estimate(clients)

    seconds, partition = timed(lambda: collaboration_equilibrium(range(n), counting))
    expected = sorted(
        (frozenset(np.flatnonzero(kind == k).tolist()) for k in range(clusters)), key=sorted
    )
    return {
        "estimator": "greedy (GGC, no budget)",
        "clients": n,
        "seconds": seconds,
        "coalitions": len(partition),
        "largest_coalition": max(len(c) for c in partition),
        "utility_evaluations": evaluations[0],
        "iterations": iterations[0],
        "recovered_clusters": partition == expected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20,100,500", help="numbers of clients N")
    parser.add_argument("--restarts", type=int, default=100, help="restarts per solve")
    parser.add_argument("--c", type=float, default=10.0, help="FedCollab's C")
    parser.add_argument("--repeats", type=int, default=3, help="timed solves for N < 500")
    parser.add_argument("--reference-restarts", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick", action="store_true", help="N >= 500 with restarts/10, extrapolated"
    )
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    load_before = os.getloadavg()

    solver_rows = bench_fedcollab(args)
    print(f"a) FedCollab solve_coalitions, C = {args.c}, {args.restarts} restarts")
    print(
        format_table(
            [
                "N",
                "types",
                "restarts run",
                f"s for {args.restarts}",
                "ms/restart",
                "passes",
                "K",
                "= types",
            ],
            [
                [
                    r["clients"],
                    r["types"],
                    r["restarts_measured"],
                    f"{r['seconds_for_requested_restarts']:.2f}"
                    + (" (extrap.)" if r["extrapolated"] else ""),
                    f"{r['ms_per_restart']:.1f}",
                    f"{r['mean_passes_per_run']:.1f}",
                    r["coalitions"],
                    "yes" if r["recovered_types"] else "no",
                ]
                for r in solver_rows
            ],
        )
    )
    reference = bench_direct_reference(args)
    print(
        f"\n   reference at N = 20: direct re-evaluation {reference['direct_ms_per_restart']:.0f}"
        f" ms/restart vs incremental {reference['incremental_ms_per_restart']:.1f} ms/restart"
        f" ({reference['speedup']:.0f}x, same L: {reference['same_objective']})"
    )

    equilibrium_rows = [bench_equilibrium_exact(args.seed), bench_equilibrium_greedy(args.seed)]
    print("\nb) collaboration_equilibrium")
    print(
        format_table(
            ["estimator", "N", "seconds", "iterations", "coalitions", "utility evals"],
            [
                [
                    r["estimator"],
                    r["clients"],
                    f"{r['seconds']:.3f}",
                    r.get("iterations", "-"),
                    r["coalitions"],
                    r["utility_evaluations"],
                ]
                for r in equilibrium_rows
            ],
        )
    )
    print(f"   greedy instance recovered its clusters: {equilibrium_rows[1]['recovered_clusters']}")

    settings = {
        "sizes": args.sizes,
        "restarts": args.restarts,
        "c": args.c,
        "repeats": args.repeats,
        "reference_restarts": args.reference_restarts,
        "seed": args.seed,
        "quick": args.quick,
        "load_average_1_5_15min_before": load_before,
        "load_average_1_5_15min_after": os.getloadavg(),
    }
    figures = {
        "fedcollab": solver_rows,
        "fedcollab_direct_reference": reference,
        "equilibrium": equilibrium_rows,
    }
    path = write_results(
        "coalition_solver-quick" if args.quick else "coalition_solver", figures, settings
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
