"""Run one or several methods on the same federation and write their run directories."""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from torch import nn

from collabfl.client.data import (
    ClientData,
    DataPool,
    Partition,
    client_datasets,
    load_pool,
    make_partition,
    true_groups,
)
from collabfl.client.node import ClientSplits
from collabfl.engine.builders import build_method
from collabfl.engine.config import (
    ConfigError,
    ExperimentConfig,
    check_compute,
    check_partition_file,
    model_name,
)
from collabfl.engine.driver import AfterRound, drive
from collabfl.engine.inprocess import build_federation
from collabfl.engine.interrupts import init_worker, worker_task
from collabfl.engine.methods import MethodSpec
from collabfl.engine.progress import ProgressBoard, RoundUpdate, round_update
from collabfl.engine.recording import MethodRecorder, safe_name
from collabfl.engine.registry import REGISTRY
from collabfl.engine.report.comparison import write_comparison
from collabfl.engine.report.console import plain_console
from collabfl.engine.report.resume import ended_summary, finished_summary
from collabfl.engine.report.run_dir import SEEDS_FILE
from collabfl.engine.report.seeds import aggregate_seeds
from collabfl.engine.report.table import print_results
from collabfl.engine.sourced import SourcedData, sourced_data
from collabfl.engine.tracking import require_tracking, tensorboard_hook
from collabfl.kernel import devices
from collabfl.kernel.atomic import write_text
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.objective import Objective, objective_from_names
from collabfl.kernel.user_code import is_import_path
from collabfl.strategies.rounds import RoundOutcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FederationData:
    """The shared inputs of every method in a comparison."""

    pool: DataPool
    partition: Partition
    clients: list[ClientData]

    @property
    def num_classes(self) -> int:
        return self.pool.num_classes

    def splits(self, device: torch.device) -> list[ClientSplits]:
        """Every client's arrays on ``device``."""
        return [ClientSplits.from_data(client, device) for client in self.clients]


ClientsData = FederationData | SourcedData
"""Where a run's clients get their data: a dataset and a partition, or a data.source."""


def prepare_clients(config: ExperimentConfig, specs: list[MethodSpec]) -> ClientsData:
    """The clients' data for running ``specs``: from ``data.source`` (checked on a sample
    against every spec's model) when the config names one, else ``prepare_data``'s."""
    if config.data.source is not None:
        return sourced_data(config, [spec.config for spec in specs])
    return prepare_data(config)


def prepare_data(config: ExperimentConfig) -> FederationData:
    """Load the pool and make (or load) the partition the config describes."""
    data = config.data
    saved = None
    if data.partition_file is not None:
        check_partition_file(config)
        saved = _saved_partition(data.partition_file, data.num_clients)
    pool = load_pool(
        data.dataset,
        root=data.root,
        cache_dir=data.cache_dir,
        seed=config.seed,
        num_train=data.num_train,
        num_test=data.num_test,
    )
    partition = (
        saved
        if saved is not None
        else make_partition(
            pool,
            num_clients=data.num_clients,
            scheme=data.partition,
            seed=config.seed,
            alpha=data.alpha,
            classes_per_client=data.classes_per_client,
            val_fraction=data.val_fraction,
            test_ratio=data.test_ratio,
            label_flip_fraction=data.label_flip_fraction,
            size_ratio=data.size_ratio,
        )
    )
    return FederationData(pool, partition, client_datasets(pool, partition))


def _saved_partition(path: Path, num_clients: int) -> Partition:
    """``data.partition_file``, read before the pool so a wrong path fails in a second."""
    try:
        partition = Partition.load(path)
    except ValueError as e:
        raise ConfigError(f"data.partition_file: {e}") from None
    if len(partition.clients) != num_clients:
        raise ConfigError(
            f"data.partition_file has {len(partition.clients)} clients but "
            f"data.num_clients is {num_clients}"
        )
    return partition


def resolve_device(name: str) -> torch.device:
    """The config's device on this machine; ConfigError when it is not here."""
    try:
        return devices.resolve_device(name)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def run_comparison(
    config: ExperimentConfig,
    specs: list[MethodSpec],
    out_dir: Path,
    console: Console | None = None,
    resume: bool = False,
) -> list[dict[str, Any]]:
    """Run every spec on the same partition; write run dirs, plots and a results table.

    With ``resume``, a method whose run folder holds a finished run of the same settings is
    kept rather than run again (other settings: ConfigError). Cut short, the table and
    summary.json are still written, over the methods that ended, naming the others."""
    console = console or plain_console()
    check_user_code(specs)
    require_tracking(config)
    device = resolve_device(config.device)
    check_compute(config, device)
    if config.threads:
        torch.set_num_threads(config.threads)
    run_dirs = {spec.label: out_dir / safe_name(spec.label) for spec in specs}
    kept = kept_runs(specs, run_dirs) if resume else {}
    data = prepare_clients(config, specs)  # refusals here leave no --out folder behind
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(data, FederationData):
        data.partition.save(out_dir / "partition.npz")
    todo = [spec for spec in specs if spec.label not in kept]
    for spec in todo if resume else []:  # a method cut short starts again from round 0
        shutil.rmtree(run_dirs[spec.label], ignore_errors=True)
    try:
        ran = _run_specs(todo, data, device, run_dirs, config.jobs, console)
    except BaseException:
        with contextlib.suppress(Exception):  # the interrupt is what the caller must see
            write_partial_comparison(out_dir, specs, run_dirs)
        raise
    summaries = [kept.get(spec.label) or ran[spec.label] for spec in specs]
    write_comparison(out_dir, summaries, run_dirs)
    print_results(summaries, console)
    console.print(f"run directory: {out_dir}")
    return summaries


def kept_runs(specs: list[MethodSpec], run_dirs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Per label, the summary of a finished run of that spec's settings that ``--resume``
    keeps; ConfigError when a folder holds a run of other settings."""
    kept = {}
    for spec in specs:
        wanted = spec.config.model_dump(mode="json")
        try:
            summary = finished_summary(run_dirs[spec.label], wanted)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if summary is not None:
            kept[spec.label] = summary
    return kept


def _run_specs(
    specs: list[MethodSpec],
    data: ClientsData,
    device: torch.device,
    run_dirs: dict[str, Path],
    jobs_requested: int,
    console: Console,
) -> dict[str, dict[str, Any]]:
    """Run ``specs`` (in worker processes when ``jobs_requested`` allows) with a progress
    bar each; their summaries by label."""
    if not specs:
        return {}
    jobs = parallel_jobs(jobs_requested, len(specs))
    columns = (
        TextColumn("{task.description}", markup=False),  # labels as written
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        board = ProgressBoard(
            progress, [s.label for s in specs], {s.label: s.config.rounds for s in specs}
        )
        if jobs == 1:
            splits = data.splits(device)
            summaries = [
                run_method(spec, data, splits, device, run_dirs[spec.label], board.show)
                for spec in specs
            ]
        else:
            summaries = _run_in_parallel(specs, run_dirs, jobs, board)
    return {spec.label: summary for spec, summary in zip(specs, summaries, strict=True)}


def write_partial_comparison(
    out_dir: Path, specs: list[MethodSpec], run_dirs: dict[str, Path]
) -> None:
    """The comparison's summary.json, results.md and plots after an interrupt: numbers
    and curves of the methods that ended, a numberless "interrupted" line for the others."""
    summaries = [
        ended_summary(run_dirs[spec.label], spec.label, spec.config.rounds) for spec in specs
    ]
    ended = {s["method"]: run_dirs[s["method"]] for s in summaries if s["status"] != "interrupted"}
    write_comparison(out_dir, summaries, ended)


def check_user_code(specs: list[MethodSpec]) -> None:
    """Resolve the import paths the specs name (model, loss, optimiser) before anything is
    written, so a typo fails with one line rather than in a worker after the partition."""
    for spec in specs:
        config = spec.config
        objective_from_names(config.training.loss, config.training.optimizer)
        if is_import_path(model_name(config)):
            build_model(model_name(config), num_classes=0, seed=config.seed)


def run_seeds(
    runs: list[tuple[int, ExperimentConfig, list[MethodSpec]]],
    out_dir: Path,
    console: Console | None = None,
    resume: bool = False,
) -> list[dict[str, Any]]:
    """Run the same comparison once per seed, each into ``seed_<seed>/``, and write the
    aggregate over the seeds that finished (also when a later seed is interrupted) into
    ``out_dir``: summary.json, results.md and plots with spread bands across seeds.
    ``resume``: keep each seed's finished runs of the same settings (run_comparison)."""
    console = console or plain_console()
    planned = [seed for seed, _, _ in runs]
    labels = [spec.label for spec in runs[0][2]]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(
        out_dir / SEEDS_FILE,
        json.dumps({"seeds": planned, "methods": labels}) + "\n",
        shared=True,
    )
    by_seed: dict[int, list[dict[str, Any]]] = {}
    try:
        for seed, config, specs in runs:
            console.rule(f"seed {seed}")
            seed_dir = out_dir / seed_folder(seed)
            by_seed[seed] = run_comparison(config, specs, seed_dir, console, resume)
    except BaseException:
        with contextlib.suppress(Exception):  # the interrupt is what the caller must see
            write_seed_outputs(out_dir, labels, by_seed, planned)
        raise
    aggregates = write_seed_outputs(out_dir, labels, by_seed, planned)
    console.rule(f"{len(planned)} seeds")
    print_results(aggregates, console)
    console.print(f"run directory: {out_dir}")
    return aggregates


def seed_folder(seed: int) -> str:
    """The sub-folder of a multi-seed run holding one seed's comparison."""
    return f"seed_{seed}"


def write_seed_outputs(
    out_dir: Path, labels: list[str], by_seed: dict[int, list[dict[str, Any]]], planned: list[int]
) -> list[dict[str, Any]]:
    """The aggregate over the seeds in ``by_seed`` (their runs in ``seed_<seed>/<method>``),
    written into ``out_dir`` with its table and plots; returns the aggregates."""
    aggregates = aggregate_seeds(labels, by_seed, planned)
    run_dirs = {
        a["method"]: [out_dir / seed_folder(s) / safe_name(a["method"]) for s in a["seeds"]]
        for a in aggregates
    }
    write_comparison(out_dir, aggregates, run_dirs)
    return aggregates


def parallel_jobs(requested: int, num_specs: int) -> int:
    """Worker processes for a comparison: 0 means one per CPU core, never more than specs."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(requested or cores or 1, num_specs))


_updates: Any = None
"""In a worker process: the queue its methods' round updates go to the parent on."""


def _init_worker(updates: Any) -> None:
    global _updates
    init_worker()
    _updates = updates


def _run_in_parallel(
    specs: list[MethodSpec], run_dirs: dict[str, Path], jobs: int, board: ProgressBoard
) -> list[dict[str, Any]]:
    """One method per worker process; each rebuilds the same partition from the seed and
    sends an update per round, which the board shows as it arrives."""
    results: dict[str, dict[str, Any]] = {}
    context = multiprocessing.get_context("spawn")
    updates = context.SimpleQueue()  # put() writes at once: a round's update precedes its result
    pool = context.Pool(jobs, initializer=_init_worker, initargs=(updates,))
    try:
        pending = {
            s.label: pool.apply_async(_run_labelled, ((s, run_dirs[s.label]),))
            for s in costliest_first(specs)
        }
        while pending:
            done = [label for label, result in pending.items() if result.ready()]
            while not updates.empty():  # after the check: a finished method's rounds are in
                board.show(updates.get())
            for label in done:
                results[label] = pending.pop(label).get()  # a worker's error is raised here
                board.finished(label, results[label]["rounds"])
            if pending and not done:
                next(iter(pending.values())).wait(POLL_S)
        pool.close()
    except BaseException:
        pool.terminate()  # SIGTERM: each worker marks its method interrupted and exits
        raise
    finally:
        pool.join()
    return [results[s.label] for s in specs]


def costliest_first(specs: list[MethodSpec]) -> list[MethodSpec]:
    """The order to hand specs to the pool (it starts them first come, first served): the
    costliest first, by the registry's cost per round times the rounds, so the last method
    to start is a short one and the workers finish close together."""
    return sorted(specs, key=lambda s: -REGISTRY.entry(s.name).cost * s.config.rounds)


POLL_S = 0.1
"""How often the parent looks for round updates while its workers run."""


def _run_labelled(work: tuple[MethodSpec, Path]) -> dict[str, Any]:
    spec, run_dir = work
    with worker_task():
        return _run_one(spec, run_dir)


def _run_one(spec: MethodSpec, run_dir: Path) -> dict[str, Any]:
    """Worker entry point: the same work ``run_comparison`` does for one spec."""
    config = spec.config
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    check_compute(config, device)
    data = prepare_clients(config, [spec])
    return run_method(spec, data, data.splits(device), device, run_dir, _updates.put)


def run_method(
    spec: MethodSpec,
    data: ClientsData,
    splits: list[ClientSplits],
    device: torch.device,
    run_dir: Path,
    on_round: Callable[[RoundUpdate], None] | None = None,
) -> dict[str, Any]:
    """Run one method to the end, recording every round (and to the tracking sinks the
    config asks for), passing ``on_round`` an update per round; return its summary."""
    config = spec.config
    module = build_model(model_name(config), data.num_classes, seed=config.seed)
    objective = objective_from_names(config.training.loss, config.training.optimizer)
    with tensorboard_hook(config, spec.label) as track:

        def after_round(outcome: RoundOutcome, rows: list[dict[str, Any]]) -> None:
            track(outcome, rows)
            if on_round is not None:
                on_round(round_update(spec.label, config.rounds, outcome, rows))

        return run_on_splits(
            spec,
            splits,
            module,
            objective,
            device,
            run_dir,
            model_name(config),
            after_round,
            data=data_record(config, data.partition) if isinstance(data, FederationData) else None,
        )


def data_record(config: ExperimentConfig, partition: Partition) -> dict[str, Any] | None:
    """The record's ``data`` section when the partition has true groups: the config's, plus
    each client's group (``true_groups``), which figures mark; None (the config's as it is)
    otherwise."""
    groups = true_groups(partition.meta)
    if groups is None:
        return None
    return {**config.data.model_dump(mode="json"), "true_groups": groups}


def run_on_splits(
    spec: MethodSpec,
    splits: list[ClientSplits],
    module: nn.Module,
    objective: Objective,
    device: torch.device,
    run_dir: Path,
    model_label: str,
    after_round: AfterRound,
    given: dict[str, str] | None = None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``spec`` on clients holding ``splits``, all starting from ``module``'s weights,
    recording every round in ``run_dir``; return the summary. ``given``: what the Python
    API was handed in place of config fields, recorded beside the config; ``data``: the
    record's description of the clients' data when it is not the config's."""
    config = spec.config
    workspace = FlatModel(module, device)
    federation = build_federation(splits, workspace, config.training, config.seed, objective)
    method = build_method(spec, federation.sample_counts, workspace)
    recorder = MethodRecorder(
        spec, run_dir, len(splits), model_label, workspace.nbytes, given=given, data=data
    )
    return drive(method, federation, config.rounds, recorder, after_round)
