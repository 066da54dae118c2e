"""Recording a method's rounds into its run directory (shared by every runtime)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import torch

from collabfl.engine.config import RetentionConfig, resolve_budget
from collabfl.engine.methods import MethodSpec
from collabfl.engine.report.plots import plot_adjacency_heatmaps
from collabfl.engine.report.run_dir import FINE_TUNE, Retention, RunWriter, read_run
from collabfl.engine.report.summary import summarize
from collabfl.strategies.metrics import recorded_names
from collabfl.strategies.rounds import RoundOutcome

ROW_KEYS = recorded_names()
"""What a metrics row keeps of a client's metrics: the recorded ClientMetrics fields, in
order (``*_s``: seconds the client spent; ``coalition``: index of the client's coalition in
the round's list, coalition methods only)."""


class MethodRecorder:
    """Writes config, per-round rows, graphs, coalitions, then the summary and heatmaps of a run.

    ``data`` replaces the config's ``data`` section in the record: a real federation's
    clients bring their own data, so the record names theirs (``num_clients``, ``dataset``,
    ``partition``), never the TOML's defaults the federation did not use."""

    def __init__(
        self,
        spec: MethodSpec,
        run_dir: Path,
        num_clients: int,
        model: str,
        model_bytes: int,
        resume_after: int | None = None,
        given: dict[str, str] | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.num_clients = num_clients
        self.model_bytes = model_bytes
        retention = retention_of(spec.config.retention)
        self.writer = RunWriter(run_dir, resume_after=resume_after, retention=retention)
        self._round_started = time.perf_counter()
        config = resolved_config(spec, num_clients, model, model_bytes)
        if given:  # what the Python API was given in place of config fields (collabfl.api)
            config["resolved"]["python_api"] = given
        if data is not None:  # a federation's: its clients' data, not the config's defaults
            config["data"] = data
        self.writer.write_config(config)

    def record(
        self, outcome: RoundOutcome, coordinator_bytes: dict[int, int]
    ) -> list[dict[str, Any]]:
        """Append one round; returns the rows written (other sinks may want them)."""
        rows = round_rows(outcome, coordinator_bytes)
        now = time.perf_counter()
        for row in rows:
            row["round_s"] = now - self._round_started  # wall time of the whole round
            if outcome.round >= self.spec.config.rounds:  # not a round: what follows them
                row["phase"] = FINE_TUNE
        self._round_started = now
        self.writer.log_round(rows)
        if outcome.graph is not None:
            self.writer.log_graph(outcome.round, self.num_clients, outcome.graph)
        if outcome.coalitions is not None:
            self.writer.log_coalitions(outcome.round, outcome.coalitions)
        return rows

    def record_failures(self, failures: list[dict[str, Any]]) -> None:
        """Append the steps that failed on clients since the last round (their rounds)."""
        self.writer.log_failures(failures)

    def finish(
        self, wall_time_s: float, status: str = "finished", message: str | None = None
    ) -> dict[str, Any]:
        """Write the summary (``status``: how the run ended; ``message``: why, for a failed
        run) and the graph heatmaps."""
        records = read_run(self.run_dir)
        summary = summarize(
            records,
            method=self.spec.label,
            wall_time_s=wall_time_s,
            num_clients=self.num_clients,
            status=status,
        )
        if message is not None:
            summary["message"] = message
        retention = self.writer.retention
        if records.graphs and retention.pruned_by(max(records.graphs)):
            summary["graph_retention"] = retention.describe()  # the graphs do not cover all
        summary["model_bytes"] = self.model_bytes
        summary["budget"] = records.config["resolved"]["budget"]
        self.writer.write_summary(summary)
        plot_adjacency_heatmaps(records, self.run_dir / "graph_heatmaps.png")
        return summary


def retention_of(config: RetentionConfig) -> Retention:
    """The run folder's retention as the config's ``retention`` section sets it."""
    return Retention(
        graphs_keep_last=config.graphs_keep_last,
        graphs_keep_every=config.graphs_keep_every,
        messages_max_bytes=int(config.messages_max_mib * (1 << 20)),
        messages_keep=config.messages_keep,
    )


def round_rows(outcome: RoundOutcome, coordinator_bytes: dict[int, int]) -> list[dict[str, Any]]:
    """metrics.jsonl rows for one round: one per client that finished it."""
    rows = []
    for client, metrics in sorted(outcome.metrics.items()):
        row: dict[str, Any] = {"round": outcome.round, "client": client}
        row.update({key: _json_value(getattr(metrics, key)) for key in ROW_KEYS})
        row["bytes_fetched"] = row["bytes_fetched"] or 0
        row["peak_peer_models"] = row["peak_peer_models"] or 0
        row["coordinator_bytes"] = coordinator_bytes.get(client, 0)
        rows.append(row)
    return rows


def _json_value(value: object) -> object:
    """A metric as metrics.jsonl holds it (sequences as lists)."""
    return list(value) if isinstance(value, tuple) else value


def resolved_config(
    spec: MethodSpec, num_clients: int, model: str, model_bytes: int
) -> dict[str, Any]:
    """The config as run, plus what was derived from it (budget in peers, model size)."""
    config = spec.config.model_dump(mode="json")
    budget = resolve_budget(spec.config.dpfl.budget, num_clients)
    config["resolved"] = {
        "label": spec.label,
        "budget": budget if spec.name.startswith("dpfl") else None,
        "model": model,
        "model_bytes": model_bytes,
        "torch": torch.__version__,
    }
    return config


def safe_name(label: str) -> str:
    """A folder name for a method label such as ``dpfl:budget=0.1``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label)
