"""The ServerApp: Flower's own FedAvg over every node, with a timeline printed per round.

Each round's end (FedAvg's ``evaluate_fn`` hook, called after round 0's start and after
every round) and each aggregation print one line ``FLOOR_EVENT {json}`` with
``time.monotonic()``, a system-wide clock on Linux, so the runner on the same machine can
place them against the moment it launched the federation. Printed lines reach the runner
through ``flwr run --stream``.
"""

from __future__ import annotations

import json
import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from floor_app.task import initial_model

MARKER = "FLOOR_EVENT"

app = ServerApp()


class Timeline:
    """Prints the events of the run: aggregations and round ends with the weights' change."""

    def __init__(self) -> None:
        self.round = 0
        self.weights: np.ndarray | None = None

    def emit(self, event: str, server_round: int, **fields: float) -> None:
        record = {"event": event, "round": server_round, "t": time.monotonic(), **fields}
        print(f"{MARKER} {json.dumps(record)}", flush=True)

    def round_end(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """``evaluate_fn``: the global weights after ``server_round`` (0: the initial ones)."""
        weights = np.concatenate([a.ravel() for a in arrays.to_numpy_ndarrays()])
        change = 0.0 if self.weights is None else float(np.linalg.norm(weights - self.weights))
        self.round, self.weights = server_round, weights
        self.emit("round_end", server_round, change=change)
        return None

    def trained(self, replies: list[RecordDict], weight_key: str) -> MetricRecord:
        """Train aggregation: the slowest node's training time and the mean loss."""
        return self._slowest_and_mean("trained", replies, "train-s", "train-loss")

    def evaluated(self, replies: list[RecordDict], weight_key: str) -> MetricRecord:
        """Evaluate aggregation: the slowest node's evaluation time and the mean accuracy."""
        return self._slowest_and_mean("evaluated", replies, "eval-s", "accuracy")

    def _slowest_and_mean(
        self, event: str, replies: list[RecordDict], seconds: str, value: str
    ) -> MetricRecord:
        """The slowest node's ``seconds`` and the mean ``value`` over the replies, emitted
        as ``event`` for the round under way."""
        metrics = [reply.metric_records["metrics"] for reply in replies]
        slowest = max(float(m[seconds]) for m in metrics)
        mean = float(np.mean([float(m[value]) for m in metrics]))
        name = "slowest_" + seconds.replace("-", "_")
        self.emit(
            event,
            self.round + 1,
            replies=len(replies),
            **{name: slowest, value.replace("-", "_"): mean},
        )
        return MetricRecord({"slowest-" + seconds: slowest, value: mean})


@app.main()
def main(grid: Grid, context: Context) -> None:
    """FedAvg over all ``min-nodes`` nodes (fraction 1.0) for ``num-server-rounds`` rounds."""
    config = context.run_config
    nodes = int(config["min-nodes"])
    timeline = Timeline()
    strategy = FedAvg(
        fraction_train=1.0,
        fraction_evaluate=float(config["fraction-evaluate"]),
        min_train_nodes=nodes,
        min_evaluate_nodes=nodes,
        min_available_nodes=nodes,
        train_metrics_aggr_fn=timeline.trained,
        evaluate_metrics_aggr_fn=timeline.evaluated,
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(initial_model(config).state_dict()),
        num_rounds=int(config["num-server-rounds"]),
        train_config=ConfigRecord(),
        evaluate_fn=timeline.round_end,
    )
