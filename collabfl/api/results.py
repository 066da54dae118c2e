"""What ``collabfl.api.run`` returns: the run's summary and every client's figures, typed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class RunResult:
    """One method's run: how it ended, its headline figures and every client's."""

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
        )


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
