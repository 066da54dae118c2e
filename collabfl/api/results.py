"""What ``collabfl.api.run`` returns: the run's summary and every client's figures, typed."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from collabfl.engine.report.run_dir import RunRecords
from collabfl.engine.report.summary import latest_rows


@dataclass(frozen=True)
class ClientResult:
    """One client at the end of the run (its last reported round).

    ``best_test_acc`` is the test accuracy of the client's best-validation model, the figure
    the summary averages; ``test_acc`` is its model's in that last round.
    """

    client: int
    round: int
    best_val_acc: float | None
    best_test_acc: float | None
    val_acc: float | None
    test_acc: float | None
    val_loss: float | None
    test_loss: float | None
    train_loss: float | None
    metrics: Mapping[str, Any]
    """The client's last metrics row, every recorded field (as in metrics.jsonl)."""


@dataclass(frozen=True, repr=False)
class RunResult:
    """One method's run: how it ended, its headline figures and every client's.

    Accuracies are fractions in [0, 1] (the tables and reprs show percent); the std is the
    population std (ddof=0) across the clients, who are the whole federation.
    """

    method: str
    status: str
    """How the run ended, as summary.json says ("finished" for a run that returns)."""
    rounds: int
    mean_test_acc: float | None
    """Mean over clients of each client's best-validation model's test accuracy."""
    std_test_acc: float | None
    clients: tuple[ClientResult, ...]
    summary: Mapping[str, Any]
    """The whole summary, as the run directory's summary.json holds it."""
    history: tuple[Mapping[str, Any], ...]
    """Every metrics row: one per client per round."""
    run_dir: Path | None
    """Where the run directory was written (None: ``out`` was not given)."""
    graphs: Mapping[int, np.ndarray] = field(default_factory=dict)
    """The collaboration graph per round the run folder kept, as an N×N array:
    ``graphs[t][i, j]`` is the weight client i gave client j's model in round t (graph
    methods only; empty otherwise). A run longer than ``retention.graphs_keep_last`` rounds
    keeps only every ``retention.graphs_keep_every``-th round before those.
    ``networkx.from_numpy_array(graphs[t], create_using=networkx.DiGraph)`` makes a graph."""

    def __repr__(self) -> str:
        return (
            f"<RunResult {self.method}: {self.status} after {self.rounds} rounds, "
            f"test acc {_percent_spread(self.mean_test_acc, self.std_test_acc)} "
            f"across {len(self.clients)} clients>"
        )

    @classmethod
    def from_records(
        cls, summary: Mapping[str, Any], records: RunRecords, run_dir: Path | None
    ) -> RunResult:
        clients = tuple(_client(row) for _, row in sorted(latest_rows(records.rows).items()))
        return cls(
            method=str(summary["method"]),
            status=str(summary["status"]),
            rounds=int(summary["rounds"]),
            mean_test_acc=summary.get("mean_test_acc"),
            std_test_acc=summary.get("std_test_acc"),
            clients=clients,
            summary=dict(summary),
            history=tuple(records.rows),
            run_dir=run_dir,
            graphs=dict(records.graphs),
        )


def _percent_spread(mean: float | None, std: float | None) -> str:
    """``mean ± std`` in percent ("—" for what is not known)."""
    if mean is None:
        return "—"
    return f"{mean * 100:.2f}%" + ("" if std is None else f" ± {std * 100:.2f}")


def _client(row: Mapping[str, Any]) -> ClientResult:
    return ClientResult(
        client=int(row["client"]),
        round=int(row["round"]),
        best_val_acc=row.get("best_val_acc"),
        best_test_acc=row.get("best_test_acc"),
        val_acc=row.get("val_acc"),
        test_acc=row.get("test_acc"),
        val_loss=row.get("val_loss"),
        test_loss=row.get("test_loss"),
        train_loss=row.get("train_loss"),
        metrics=dict(row),
    )


@dataclass(frozen=True, repr=False)
class MethodComparison:
    """One method over the seeds of a comparison; accuracies are fractions in [0, 1]."""

    method: str
    runs: tuple[RunResult, ...]
    """One run per seed, in the order of ``seeds``."""
    seeds: tuple[int, ...]
    mean_test_acc: float | None
    """Mean over seeds of each run's mean test accuracy over clients."""
    std_across_seeds: float | None
    """Sample std (ddof=1) of the runs' mean test accuracies: the seeds are a sample of
    those one could draw (None with one seed)."""
    std_across_clients: float | None
    """Mean over seeds of each run's population std (ddof=0) across its clients."""

    def __repr__(self) -> str:
        seeds = _percent_spread(self.mean_test_acc, self.std_across_seeds)
        clients = _percent_spread(self.std_across_clients, None)
        return f"<{self.method}: test acc {seeds} across seeds; std across clients {clients}>"


ROW_LEVELS = ("method", "seed", "client")


@dataclass(frozen=True, repr=False)
class Comparison:
    """What ``compare`` returns: every method over every seed, and where the outputs are."""

    methods: tuple[MethodComparison, ...]
    seeds: tuple[int, ...]
    out: Path | None
    """The folder holding summary.json, results.md and the plots (None: ``out`` not given)."""

    def __getitem__(self, method: str) -> MethodComparison:
        for compared in self.methods:
            if compared.method == method:
                return compared
        raise KeyError(f"no method {method!r}; compared: {[m.method for m in self.methods]}")

    def rows(self, level: str = "method") -> list[dict[str, Any]]:
        """Plain rows: one per method (its means and spreads), per method and seed, or per
        method, seed and client (each client's best-validation test accuracy)."""
        if level not in ROW_LEVELS:
            raise ValueError(f"level must be one of {ROW_LEVELS}, got {level!r}")
        if level == "method":
            return [
                {
                    "method": m.method,
                    "seeds": len(m.seeds),
                    "mean_test_acc": m.mean_test_acc,
                    "std_across_seeds": m.std_across_seeds,
                    "std_across_clients": m.std_across_clients,
                }
                for m in self.methods
            ]
        if level == "seed":
            return [
                {
                    "method": m.method,
                    "seed": seed,
                    "mean_test_acc": run.mean_test_acc,
                    "std_across_clients": run.std_test_acc,
                    "rounds": run.rounds,
                    "status": run.status,
                }
                for m in self.methods
                for seed, run in zip(m.seeds, m.runs, strict=True)
            ]
        return [
            {"method": m.method, "seed": seed, "client": c.client, "test_acc": c.best_test_acc}
            for m in self.methods
            for seed, run in zip(m.seeds, m.runs, strict=True)
            for c in run.clients
        ]

    def to_dataframe(self, level: str = "method") -> Any:
        """``rows(level)`` as a pandas DataFrame (pandas is needed only here)."""
        try:
            pandas = importlib.import_module("pandas")
        except ImportError:
            raise ImportError(
                "to_dataframe needs pandas (pip install pandas); rows() gives the same "
                "figures as plain dicts"
            ) from None
        return pandas.DataFrame(self.rows(level))

    def __repr__(self) -> str:
        width = max(len(m.method) for m in self.methods)
        lines = [
            f"<Comparison of {len(self.methods)} methods over seeds {list(self.seeds)}: "
            "test acc mean ± std across seeds (std across clients)"
        ]
        for m in self.methods:
            spread = _percent_spread(m.mean_test_acc, m.std_across_seeds)
            clients = _percent_spread(m.std_across_clients, None)
            lines.append(f"  {m.method:<{width}}  {spread}  ({clients})")
        where = f"  outputs: {self.out}" if self.out is not None else ""
        return "\n".join(lines + ([where] if where else [])) + ">"
