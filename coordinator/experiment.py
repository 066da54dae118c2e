"""Run one or several methods on the same federation and write their run directories."""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from collabfl.client.data import (
    ClientData,
    DataPool,
    Partition,
    client_datasets,
    load_pool,
    make_partition,
)
from collabfl.client.flat import FlatModel
from collabfl.client.models import DEFAULT_MODEL, build_model
from collabfl.coordinator.config import ConfigError, ExperimentConfig, resolve_budget
from collabfl.coordinator.inprocess import build_federation, to_device
from collabfl.coordinator.methods import MethodSpec, build_method
from collabfl.coordinator.report.plots import (
    plot_accuracy_by_round,
    plot_accuracy_vs_variance,
    plot_adjacency_heatmaps,
)
from collabfl.coordinator.report.run_dir import RunWriter, read_run
from collabfl.coordinator.report.summary import summarize
from collabfl.coordinator.report.table import print_results, results_markdown
from collabfl.strategies.rounds import RoundOutcome

log = logging.getLogger(__name__)

ROW_KEYS = (
    "train_loss",
    "val_loss",
    "val_acc",
    "test_loss",
    "test_acc",
    "best_val_acc",
    "best_test_acc",
    "bytes_fetched",
    "peak_peer_models",
    "num_collaborators",
    "reward_evaluations",
    "fetch_failures",
    "malicious",
)


@dataclass(frozen=True)
class FederationData:
    """The shared inputs of every method in a comparison."""

    pool: DataPool
    partition: Partition
    clients: list[ClientData]


def prepare_data(config: ExperimentConfig) -> FederationData:
    """Load the pool and make (or load) the partition the config describes."""
    data = config.data
    pool = load_pool(
        data.dataset,
        root=data.root,
        cache_dir=data.cache_dir,
        seed=config.seed,
        num_train=data.num_train,
        num_test=data.num_test,
    )
    if data.partition_file is not None:
        partition = Partition.load(data.partition_file)
        if len(partition.clients) != data.num_clients:
            raise ConfigError(
                f"data.partition_file has {len(partition.clients)} clients but "
                f"data.num_clients is {data.num_clients}"
            )
    else:
        partition = make_partition(
            pool,
            num_clients=data.num_clients,
            scheme=data.partition,
            seed=config.seed,
            alpha=data.alpha,
            classes_per_client=data.classes_per_client,
            val_fraction=data.val_fraction,
            test_ratio=data.test_ratio,
            label_flip_fraction=data.label_flip_fraction,
        )
    return FederationData(pool, partition, client_datasets(pool, partition))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: 'cuda' was requested but no CUDA device is available")
    return torch.device(name)


def model_name(config: ExperimentConfig) -> str:
    name = config.model.name
    return DEFAULT_MODEL[config.data.dataset] if name == "auto" else name


def run_comparison(
    config: ExperimentConfig,
    specs: list[MethodSpec],
    out_dir: Path,
    console: Console | None = None,
) -> list[dict[str, Any]]:
    """Run every spec on the same partition; write run dirs, plots and a results table."""
    console = console or Console()
    device = resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = prepare_data(config)
    data.partition.save(out_dir / "partition.npz")
    splits = to_device(data.clients, device)
    summaries = []
    run_dirs = {}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        for spec in specs:
            run_dir = out_dir / safe_name(spec.label)
            summaries.append(run_method(spec, data, splits, device, run_dir, progress))
            run_dirs[spec.label] = run_dir
    runs = {label: read_run(path) for label, path in run_dirs.items()}
    plot_accuracy_by_round(runs, out_dir / "accuracy_by_round.png")
    plot_accuracy_vs_variance(summaries, out_dir / "accuracy_vs_variance.png")
    (out_dir / "summary.json").write_text(json.dumps(summaries, indent=2))
    (out_dir / "results.md").write_text(results_markdown(summaries))
    print_results(summaries, console)
    console.print(f"run directory: {out_dir}")
    return summaries


def run_method(
    spec: MethodSpec,
    data: FederationData,
    splits: list,
    device: torch.device,
    run_dir: Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run one method to the end, recording every round; return its summary."""
    config = spec.config
    num_clients = len(splits)
    workspace = FlatModel(
        build_model(model_name(config), data.pool.num_classes, seed=config.seed), device
    )
    federation = build_federation(splits, workspace, config.training, config.seed)
    method = build_method(spec, num_clients)
    writer = RunWriter(run_dir)
    writer.write_config(resolved_config(spec, num_clients, workspace))
    task = None
    if progress is not None:
        task = progress.add_task(spec.label, total=config.rounds)
    started = time.perf_counter()
    for outcome in method.rounds(federation, config.rounds):
        coordinator_bytes = federation.take_coordinator_bytes()
        writer.log_round(round_rows(outcome, coordinator_bytes))
        if outcome.graph is not None:
            writer.log_graph(outcome.round, num_clients, outcome.graph)
        if task is not None:
            progress.update(task, completed=min(outcome.round + 1, config.rounds))
    wall_time = time.perf_counter() - started
    records = read_run(run_dir)
    summary = summarize(records, method=spec.label, wall_time_s=wall_time)
    summary["model_bytes"] = workspace.nbytes
    summary["budget"] = records.config["resolved"]["budget"]
    writer.write_summary(summary)
    plot_adjacency_heatmaps(records, run_dir / "graph_heatmaps.png")
    return summary


def round_rows(outcome: RoundOutcome, coordinator_bytes: dict[int, int]) -> list[dict]:
    """metrics.jsonl rows for one round: one per client that finished it."""
    rows = []
    for client, metrics in sorted(outcome.metrics.items()):
        row: dict[str, Any] = {"round": outcome.round, "client": client}
        row.update({key: metrics.get(key) for key in ROW_KEYS})
        row["bytes_fetched"] = row["bytes_fetched"] or 0
        row["peak_peer_models"] = row["peak_peer_models"] or 0
        row["coordinator_bytes"] = coordinator_bytes.get(client, 0)
        rows.append(row)
    return rows


def resolved_config(spec: MethodSpec, num_clients: int, workspace: FlatModel) -> dict[str, Any]:
    """The config as run, plus what was derived from it (budget in peers, model size)."""
    config = spec.config.model_dump(mode="json")
    config["resolved"] = {
        "label": spec.label,
        "budget": resolve_budget(spec.config.dpfl.budget, num_clients)
        if spec.name.startswith("dpfl")
        else None,
        "model": model_name(spec.config),
        "model_parameters": workspace.num_parameters,
        "torch": torch.__version__,
    }
    return config


def safe_name(label: str) -> str:
    """A folder name for a method label such as ``dpfl:budget=0.1``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label)
