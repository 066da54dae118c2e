"""A method's results across seeds: the mean and spread a paper reports.

Only seeds whose run of the method finished count; the aggregate says how many of the
planned seeds that is (``seeds_finished``), so a seed cut short is never averaged in.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collabfl.engine.report.summary import RUN_STATUSES

MEAN_OVER_SEEDS = (
    "mean_test_acc",
    "var_test_acc",
    "mean_best_val_acc",
    "bytes_fetched_per_client_round",
    "coordinator_bytes_per_client_round",
    "graph_sparsity_last",
    "graph_symmetry_last",
    "wall_time_s",
)
"""Per-run figures the aggregate averages over seeds (variance: the mean client variance)."""


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _sample_std(values: list[float]) -> float | None:
    """Sample std (ddof=1): the seeds are a sample of the seeds one could have drawn."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


def aggregate_method(
    label: str, runs: dict[int, dict[str, Any]], planned: list[int]
) -> dict[str, Any]:
    """One method's aggregate over the finished runs among ``runs`` (seed → its summary)."""
    finished = {s: r for s, r in sorted(runs.items()) if r.get("status") == "finished"}
    summaries = list(finished.values())
    failed = any(r.get("status") == "failed" for r in runs.values())
    status = "failed" if failed else RUN_STATUSES[2]
    aggregate: dict[str, Any] = {
        "method": label,
        "status": "finished" if len(finished) == len(planned) else status,
        "seeds": list(finished),
        "seeds_finished": f"{len(finished)}/{len(planned)}",
        "test_acc_by_seed": {str(s): r.get("mean_test_acc") for s, r in finished.items()},
    }
    for key in MEAN_OVER_SEEDS:
        aggregate[key] = _mean([r[key] for r in summaries if r.get(key) is not None])
    accuracies = [r["mean_test_acc"] for r in summaries if r.get("mean_test_acc") is not None]
    aggregate["seed_std_test_acc"] = _sample_std(accuracies)
    peaks = [int(r["peak_peer_models"]) for r in summaries if r.get("peak_peer_models") is not None]
    aggregate["peak_peer_models"] = max(peaks) if peaks else None
    reported = [str(r["clients_reported"]) for r in summaries if r.get("clients_reported")]
    if reported:  # the seed that heard from the fewest clients
        aggregate["clients_reported"] = min(reported, key=lambda k: int(k.split("/")[0]))
    return aggregate


def aggregate_seeds(
    labels: list[str], by_seed: dict[int, list[dict[str, Any]]], planned: list[int]
) -> list[dict[str, Any]]:
    """Per method (in ``labels`` order), its aggregate over the seeds in ``by_seed`` (seed →
    the summaries of the methods that seed ran)."""
    return [
        aggregate_method(
            label,
            {
                seed: summary
                for seed, summaries in by_seed.items()
                for summary in summaries
                if summary["method"] == label
            },
            planned,
        )
        for label in labels
    ]
