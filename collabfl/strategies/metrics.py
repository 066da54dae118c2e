"""Everything a client or a method reports about one client in one round, as one dataclass.

Its field names are the single source for the run outputs: the fields marked ``recorded``
are the columns of metrics.jsonl, in field order (engine/recording.py), and the rest
(what a method reads back, such as DPFL's ``chosen``) stay in memory. A field is ``None``
until some reply or the method sets it; replies of one round merge field by field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

RECORDED: Mapping[str, bool] = {"recorded": True}
"""Field metadata of a metric that is written to metrics.jsonl."""


@dataclass(frozen=True)
class ClientMetrics:
    """One client's metrics for a round (``*_s``: seconds the client spent on a verb)."""

    # --- recorded, in metrics.jsonl column order -------------------------------------------
    train_loss: float | None = field(default=None, metadata=RECORDED)
    val_loss: float | None = field(default=None, metadata=RECORDED)
    val_acc: float | None = field(default=None, metadata=RECORDED)
    test_loss: float | None = field(default=None, metadata=RECORDED)
    test_acc: float | None = field(default=None, metadata=RECORDED)
    best_val_acc: float | None = field(default=None, metadata=RECORDED)
    best_test_acc: float | None = field(default=None, metadata=RECORDED)
    """Test accuracy of the best-validation model of the evaluated slot so far."""
    best_candidate: str | None = field(default=None, metadata=RECORDED)
    """Which candidate that model was ("local": post-training, "aggregate": post-
    collaboration); only set where a method scores both."""
    local_val_acc: float | None = field(default=None, metadata=RECORDED)
    local_test_acc: float | None = field(default=None, metadata=RECORDED)
    """Accuracies of the post-training (un-aggregated) model, where a method scores it."""
    bytes_fetched: int | None = field(default=None, metadata=RECORDED)
    """Peer model bytes downloaded since the last evaluation."""
    peak_peer_models: int | None = field(default=None, metadata=RECORDED)
    """Most peer models resident at once since the last evaluation (the budget's check)."""
    num_collaborators: int | None = field(default=None, metadata=RECORDED)
    reward_evaluations: int | None = field(default=None, metadata=RECORDED)
    """Validation passes of a greedy collaborator search."""
    fetch_failures: int | None = field(default=None, metadata=RECORDED)
    malicious: bool | None = field(default=None, metadata=RECORDED)
    train_s: float | None = field(default=None, metadata=RECORDED)
    collaborate_s: float | None = field(default=None, metadata=RECORDED)
    fetch_s: float | None = field(default=None, metadata=RECORDED)
    evaluate_s: float | None = field(default=None, metadata=RECORDED)
    gain: float | None = field(default=None, metadata=RECORDED)
    """iPFL ledger: the value of the imported models."""
    sharing_cost: float | None = field(default=None, metadata=RECORDED)
    payment: float | None = field(default=None, metadata=RECORDED)
    utility: float | None = field(default=None, metadata=RECORDED)
    importers: int | None = field(default=None, metadata=RECORDED)
    """iPFL ledger: clients that import this one's model."""
    imports: tuple[int, ...] | None = field(default=None, metadata=RECORDED)
    paid_to: tuple[float, ...] | None = field(default=None, metadata=RECORDED)
    """iPFL ledger: what this client paid each of its ``imports``."""
    coalition: int | None = field(default=None, metadata=RECORDED)
    """Index of the client's coalition in the round's list (coalition methods)."""

    # --- kept in memory only -----------------------------------------------------------------
    num_samples: int | None = None
    chosen: tuple[int, ...] | None = None
    """The collaborators a COLLABORATE chose, in the order they were added."""
    skipped_peers: tuple[str, ...] | None = None
    """Why peers were skipped during a fetch (the Flower pool turns them into events)."""
    disc_acc: tuple[float, ...] | None = None
    """Held-out accuracy of each received discriminator, in the task's ``peers`` order."""
    disc_held_out: int | None = None
    loss: float | None = None
    """A GRADIENT query's mean loss."""
    samples: int | None = None
    """Samples a GRADIENT query's loss averages over."""
    discriminate_s: float | None = None
    gradient_s: float | None = None

    def merged(self, later: ClientMetrics) -> ClientMetrics:
        """These metrics with every field that ``later`` sets taken from ``later``; seconds
        add up (two steps of a round that both trained, or evaluated, took both times)."""
        updates = {
            f.name: value for f in fields(later) if (value := getattr(later, f.name)) is not None
        }
        for name in SECONDS.intersection(updates):
            updates[name] += getattr(self, name) or 0.0
        return replace(self, **updates)


WORK_SECONDS = ("train_s", "collaborate_s", "evaluate_s", "discriminate_s", "gradient_s")
"""The verbs' seconds: together, a client's work on a message."""
SECONDS = frozenset((*WORK_SECONDS, "fetch_s"))
"""Every field that counts seconds (fetch_s: a part of collaborate_s)."""


def recorded_names() -> tuple[str, ...]:
    """The metrics.jsonl columns that come from ClientMetrics, in order."""
    return tuple(f.name for f in fields(ClientMetrics) if f.metadata.get("recorded", False))
