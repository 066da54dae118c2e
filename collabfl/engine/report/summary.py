"""The final summary of one method run: the numbers results tables and plots compare."""

from collections import Counter
from typing import Any

import numpy as np

from collabfl.engine.report.graph_stats import edges_to_group, sparsity, symmetry
from collabfl.engine.report.run_dir import FINE_TUNE, RunRecords
from collabfl.engine.step_failures import summary_of


def malicious_clients(rows: list[dict[str, Any]]) -> set[int]:
    """Clients flagged malicious in any row; results are reported over the others."""
    return {int(r["client"]) for r in rows if r.get("malicious")}


def _spread(values: list[float | None], suffix: str) -> dict[str, Any]:
    """Mean, population variance (ddof=0) and std of the known values; None when none are known.

    Population variance because the clients are the whole federation, not a sample of it.
    """
    known = np.array([v for v in values if v is not None], dtype=float)
    stats: dict[str, float | None] = {"mean": None, "var": None, "std": None}
    if known.size:
        stats = {"mean": float(known.mean()), "var": float(known.var()), "std": float(known.std())}
    return {f"{name}{suffix}": value for name, value in stats.items()}


RUN_STATUSES = ("finished", "stopped", "interrupted", "failed")
"""How a run ended: all its rounds, stopped by an operator, cut short (Ctrl-C, a crash), or
failed (a step failed on every client it was sent to)."""


def latest_rows(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each client's row of the last round it reported (later rows win)."""
    latest: dict[int, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: int(r["round"])):
        latest[int(row["client"])] = row
    return latest


def rounds_by_participants(rows: list[dict[str, Any]], rounds: int) -> dict[str, int]:
    """How many of the first ``rounds`` rounds had how many participants (clients that
    reported), most first: ``{"4": 18, "3": 2}``; a round nobody reported counts under "0"."""
    per_round = Counter(int(r["round"]) for r in rows)
    histogram = Counter(per_round.values())
    histogram[0] += rounds - len(per_round)
    return {str(n): histogram[n] for n in sorted(histogram, reverse=True) if histogram[n]}


def summarize(
    records: RunRecords,
    *,
    method: str,
    wall_time_s: float,
    num_clients: int | None = None,
    status: str = "finished",
) -> dict[str, Any]:
    """Summarise a run from each client's last report, all rows' traffic and its graphs.

    Accuracy is each client's best_test_acc in the last round it reported (test accuracy of
    its best-validation model), averaged over benign clients, so a client that missed the
    last round still counts with its latest model; ``clients_reported`` says how many of the
    ``num_clients`` benign clients (default: those seen) the mean covers. When some clients
    are malicious the same statistics over all clients are added as *_all keys.
    bytes_fetched is taken to be per round, so the total sums all rows and the per client
    round figure is their mean. ``best_candidate_clients`` counts, where a method scores both,
    how many benign clients ended with their post-training ("local") or post-collaboration
    ("aggregate") model. Graph statistics use the first and last rounds that have a
    graph in the run folder (``graph_first_round``, ``graph_last_round``; the folder's
    retention may have pruned some in between: ``graph_rounds_kept`` says how many);
    coalition methods add the last recorded coalitions and their count.
    ``step_failures`` (only when a step failed on a client) counts them per round and per
    client and says in words which steps did not happen.
    """
    rows = records.rows
    if status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
    if not rows and status == "failed" and records.failures:
        return _failed_before_any_row(records, method, wall_time_s, num_clients)
    if not rows:
        raise ValueError("cannot summarise a run without metrics rows")
    last_round = max(int(r["round"]) for r in rows)
    latest = latest_rows(rows)
    malicious = malicious_clients(rows)
    benign_latest = [r for c, r in sorted(latest.items()) if c not in malicious]
    expected = len(latest) if num_clients is None else max(num_clients, len(latest))
    reported = sum(r.get("best_test_acc") is not None for r in benign_latest)

    summary: dict[str, Any] = {
        "method": method,
        "status": status,
        "num_clients": expected,
        "clients_reported": f"{reported}/{expected - len(malicious)}",
        "clients_in_last_round": sum(int(r["round"]) == last_round for r in latest.values()),
        "rounds": last_round + 1,
        "rounds_planned": records.config.get("rounds"),
        **_fine_tune(rows),
        "rounds_by_participants": rounds_by_participants(rows, last_round + 1),
        **_spread([r.get("best_test_acc") for r in benign_latest], "_test_acc"),
    }
    if malicious:
        summary.update(_spread([r.get("best_test_acc") for r in latest.values()], "_test_acc_all"))
    best_val = _spread([r.get("best_val_acc") for r in benign_latest], "_best_val_acc")
    summary["mean_best_val_acc"] = best_val["mean_best_val_acc"]
    winners = [r["best_candidate"] for r in benign_latest if r.get("best_candidate")]
    if winners:  # methods that score the post-training model beside the aggregate
        summary["best_candidate_clients"] = {
            candidate: winners.count(candidate) for candidate in ("local", "aggregate")
        }

    fetched = [int(r["bytes_fetched"]) for r in rows]
    summary["bytes_fetched_total"] = sum(fetched)
    summary["bytes_fetched_per_client_round"] = float(np.mean(fetched))
    coordinator = [int(r.get("coordinator_bytes") or 0) for r in rows]
    summary["coordinator_bytes_per_client_round"] = float(np.mean(coordinator))
    summary["peak_peer_models"] = max(int(r["peak_peer_models"]) for r in rows)

    summary.update(_graph_summary(records.graphs, malicious))
    if records.coalitions:
        final = records.coalitions[max(records.coalitions)]
        summary["coalitions_last"] = final
        summary["num_coalitions_last"] = len(final)
    if records.failures:
        summary["step_failures"] = summary_of(method, records.failures)
    summary["wall_time_s"] = float(wall_time_s)
    return summary


def _fine_tune(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``fine_tune_round``: the ``round`` a fine-tuning step was recorded under, which
    ``rounds`` counts though it is no round (FedAvg+FT: "rounds" 21 of 20 planned)."""
    steps = {int(r["round"]) for r in rows if r.get("phase") == FINE_TUNE}
    return {"fine_tune_round": min(steps)} if steps else {}


def _failed_before_any_row(
    records: RunRecords, method: str, wall_time_s: float, num_clients: int | None
) -> dict[str, Any]:
    """A run whose every client failed before reporting anything: no number to show."""
    clients = num_clients or len({int(f["client"]) for f in records.failures})
    return {
        "method": method,
        "status": "failed",
        "num_clients": clients,
        "clients_reported": f"0/{clients}",
        "rounds": 1 + max(int(f["round"]) for f in records.failures),
        "rounds_planned": records.config.get("rounds"),
        **_spread([], "_test_acc"),
        "step_failures": summary_of(method, records.failures),
        "wall_time_s": float(wall_time_s),
    }


def _graph_summary(graphs: dict[int, np.ndarray], malicious: set[int]) -> dict[str, Any]:
    """Sparsity/symmetry of the first and last graphs, and benign weight on attackers at the end."""
    if not graphs:
        return {
            "graph_rounds_kept": 0,
            "graph_first_round": None,
            "graph_last_round": None,
            "graph_sparsity_first": None,
            "graph_sparsity_last": None,
            "graph_symmetry_first": None,
            "graph_symmetry_last": None,
            "benign_edges_to_malicious_last": None,
        }
    first, last = graphs[min(graphs)], graphs[max(graphs)]
    to_malicious = None
    if malicious:
        group = np.zeros(last.shape[0], dtype=bool)
        group[[c for c in malicious if c < last.shape[0]]] = True
        to_malicious = edges_to_group(last, group)
    return {
        "graph_rounds_kept": len(graphs),
        "graph_first_round": min(graphs),
        "graph_last_round": max(graphs),
        "graph_sparsity_first": sparsity(first),
        "graph_sparsity_last": sparsity(last),
        "graph_symmetry_first": symmetry(first),
        "graph_symmetry_last": symmetry(last),
        "benign_edges_to_malicious_last": to_malicious,
    }
