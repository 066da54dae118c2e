"""Round-by-round progress of a comparison, whichever process runs the method.

A method's after-round hook turns its round into a small ``RoundUpdate``; in one process
the hook shows it at once, in ``compare``'s worker processes it goes to the parent over a
queue, and the parent's ``ProgressBoard`` shows every update as it arrives: a bar per method
and one INFO log line per round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rich.progress import Progress, TaskID

from collabfl.strategies.rounds import RoundOutcome

log = logging.getLogger("collabfl.progress")


@dataclass(frozen=True)
class RoundUpdate:
    """One finished round of one method: what the parent shows (small, picklable)."""

    label: str
    round: int
    rounds: int
    val_acc: float | None
    test_acc: float | None


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def round_update(
    label: str, rounds: int, outcome: RoundOutcome, rows: list[dict[str, Any]]
) -> RoundUpdate:
    """The update for a recorded round: the mean val/test accuracy of the clients in it."""
    return RoundUpdate(
        label, outcome.round, rounds, _mean(rows, "val_acc"), _mean(rows, "test_acc")
    )


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.2f}%"


class ProgressBoard:
    """The parent's view of running methods: a progress bar each, an INFO line per round."""

    def __init__(self, progress: Progress, labels: list[str], rounds: dict[str, int]) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {
            label: progress.add_task(label, total=rounds[label]) for label in labels
        }

    def show(self, update: RoundUpdate) -> None:
        done = update.round + 1
        if done > update.rounds:  # a step after the planned rounds (fedavg_ft's fine-tuning)
            self.progress.update(self.tasks[update.label], total=done, completed=done)
            where = f"after round {update.rounds}/{update.rounds}"
        else:
            self.progress.update(self.tasks[update.label], completed=done)
            where = f"round {done}/{update.rounds}"
        log.info(
            "%s %s: mean val acc %s, mean test acc %s",
            where,
            update.label,
            _percent(update.val_acc),
            _percent(update.test_acc),
        )

    def finished(self, label: str, rounds: int) -> None:
        """A method returned after ``rounds`` rounds (its last update may still be queued);
        ``rounds`` counts a step after the planned rounds, so the bar's total grows to it."""
        task = self.tasks[label]
        total = max(rounds, int(self.progress.tasks[task].total or 0))
        self.progress.update(task, total=total, completed=rounds)
