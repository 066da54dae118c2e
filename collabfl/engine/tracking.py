"""An optional experiment-tracking sink: TensorBoard event files beside metrics.jsonl.

The writer is torch's ``torch.utils.tensorboard.SummaryWriter``, which needs the
``tensorboard`` package (``pip install 'collabfl[tracking]'``); without it a run asking for
TensorBoard stops before it starts, with one line saying what to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collabfl.engine.config import ConfigError, ExperimentConfig
from collabfl.engine.driver import AfterRound
from collabfl.engine.recording import safe_name
from collabfl.strategies.rounds import RoundOutcome

SCALARS = {
    "accuracy/test": "test_acc",
    "accuracy/val": "val_acc",
    "accuracy/test_of_best_val_model": "best_test_acc",
    "loss/train": "train_loss",
    "loss/val": "val_loss",
    "traffic/peer_bytes": "bytes_fetched",
    "traffic/coordinator_bytes": "coordinator_bytes",
}
"""TensorBoard tag → metrics.jsonl column; each is written as its mean over the round's
clients."""


def summary_writer_class() -> Any:
    """torch's SummaryWriter, or a ConfigError naming the missing package."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            "tracking.tensorboard needs the tensorboard package, which is not installed: "
            "pip install 'collabfl[tracking]' (or tensorboard)"
        ) from None
    return SummaryWriter


def require_tracking(config: ExperimentConfig) -> None:
    """Fail now, before any work, when a requested sink cannot be written."""
    if config.tracking.tensorboard is not None:
        summary_writer_class()


def log_dir(root: Path, label: str, seed: int) -> Path:
    """One TensorBoard run per method and seed: ``<root>/<method>/seed_<seed>``."""
    return root / safe_name(label) / f"seed_{seed}"


@contextmanager
def tensorboard_hook(config: ExperimentConfig, label: str) -> Iterator[AfterRound]:
    """An after-round hook writing the round's mean metrics (a no-op when not asked for)."""
    root = config.tracking.tensorboard
    if root is None:
        yield lambda outcome, rows: None
        return
    writer = summary_writer_class()(log_dir=str(log_dir(root, label, config.seed)))

    def write(outcome: RoundOutcome, rows: list[dict[str, Any]]) -> None:
        for tag, key in SCALARS.items():
            values = [float(r[key]) for r in rows if r.get(key) is not None]
            if values:
                writer.add_scalar(tag, sum(values) / len(values), global_step=outcome.round)
        writer.flush()

    try:
        yield write
    finally:
        writer.close()
