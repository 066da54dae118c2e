"""``compare``: several methods over several seeds on the user's own model and data, with
the outputs ``collabfl compare --seeds`` writes (results table, plots, summaries)."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from collabfl.api.data import Split, client_splits, samples
from collabfl.api.methods import MethodLike, method_spec
from collabfl.api.results import Comparison, MethodComparison, RunResult
from collabfl.api.runner import (
    ConfigSource,
    Overrides,
    client_count,
    resolve_spec,
    run,
    user_data,
)
from collabfl.engine.config import ConfigError
from collabfl.engine.experiment import seed_folder, write_seed_outputs
from collabfl.engine.methods import MethodSpec
from collabfl.engine.recording import safe_name
from collabfl.engine.report.comparison import write_comparison
from collabfl.engine.report.resume import finished_summary
from collabfl.engine.report.run_dir import SEEDS_FILE, claim_output_dir, read_run
from collabfl.kernel.atomic import write_text
from collabfl.kernel.models import ModelFactory
from collabfl.kernel.objective import LossFn, OptimizerFactory
from collabfl.kernel.streamed import StreamedData


def compare(
    methods: Sequence[MethodLike],
    model: ModelFactory | nn.Module | str,
    train: Sequence[Split],
    val: Sequence[Split] | None,
    test: Sequence[Split],
    *,
    seeds: Sequence[int] = (0,),
    out: str | Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    rounds: int | None = None,
    epochs: float | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    val_fraction: float | None = None,
    stream: bool = False,
    loss: LossFn | str | None = None,
    optimizer: OptimizerFactory | str | None = None,
    config: ConfigSource = None,
    overrides: Overrides | None = None,
) -> Comparison:
    """Run every method once per seed on the same clients, as ``collabfl compare --seeds``.

    Takes what ``run`` takes (``seed`` is each of ``seeds``). A seed sets the initial
    weights of a model factory, the batches and, with ``val_fraction``, the held-out
    samples; a model instance is the same initial model for every seed. Every method and
    setting is checked before the first run. ``out``: ``seed_<s>/<method>/`` run
    directories, each seed's results.md and plots beside them, and the aggregate over the
    seeds (summary.json, results.md, accuracy_by_round.png with bands across seeds,
    accuracy_vs_variance.png) at the top. ``resume``: continue the comparison ``out``
    holds (as ``collabfl compare --seeds --resume``): a method and seed whose run finished
    with the same settings is read back, not run again; the others run afresh.
    """
    specs = [method_spec(m) for m in methods]
    plan = _checked_plan(specs, seeds)
    resumed = _resumable(out, overwrite, plan) if resume else None
    code = {"model.name": model, "training.loss": loss, "training.optimizer": optimizer}
    chosen: dict[str, Any] = {"rounds": rounds, "epochs": epochs, "lr": lr}
    chosen |= {"batch_size": batch_size, "device": device}
    resolved: dict[tuple[int, str], MethodSpec] = {}
    for spec in specs:  # every spec and setting, before anything runs
        for seed in plan:
            settings = {**chosen, "seed": seed}
            count = client_count(train)
            resolved[seed, spec] = resolve_spec(spec, config, overrides, settings, code, count)
    train, test = _loaded(train, "train", stream), _loaded(test, "test", stream)
    val = None if val is None else _loaded(val, "val", False)
    kept = (
        {} if resumed is None else _kept(resumed, resolved, train, val, test, val_fraction, stream)
    )
    by_seed: dict[int, list[RunResult]] = {}
    with _out_dir(out, overwrite, resume) as folder:
        for seed, spec in resolved.keys() - kept.keys() if resume else ():
            # a run cut short starts again from round 0
            shutil.rmtree(folder / seed_folder(seed) / safe_name(spec), ignore_errors=True)
        write_text(folder / SEEDS_FILE, json.dumps({"seeds": plan, "methods": specs}) + "\n")
        for seed in plan:
            seed_dir = folder / seed_folder(seed)
            by_seed[seed] = [
                kept.get((seed, spec))
                or run(
                    spec,
                    model,
                    train,
                    val,
                    test,
                    seed=seed,
                    val_fraction=val_fraction,
                    stream=stream,
                    loss=loss,
                    optimizer=optimizer,
                    config=config,
                    overrides=overrides,
                    out=seed_dir / safe_name(spec),
                    **chosen,
                )
                for spec in specs
            ]
            summaries = [dict(r.summary) for r in by_seed[seed]]
            write_comparison(seed_dir, summaries, {s: seed_dir / safe_name(s) for s in specs})
        summaries_by_seed = {s: [dict(r.summary) for r in runs] for s, runs in by_seed.items()}
        write_seed_outputs(folder, specs, summaries_by_seed, plan)
    where = None if out is None else Path(out)
    compared = tuple(_method(spec, k, plan, by_seed, where) for k, spec in enumerate(specs))
    return Comparison(compared, tuple(plan), where)


def _checked_plan(specs: list[str], seeds: Sequence[int]) -> list[int]:
    """The seeds to run; ValueError for an empty or repeated method or seed list."""
    if not specs:
        raise ValueError("methods is empty: give at least one method")
    repeated = sorted({s for s in specs if specs.count(s) > 1})
    if repeated:
        raise ValueError(f"methods lists {repeated} more than once")
    if isinstance(seeds, int | str) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"seeds must be integers >= 0, got {list(seeds)}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds lists a seed more than once: {list(seeds)}")
    return list(seeds)


def _method(
    spec: str,
    index: int,
    seeds: list[int],
    by_seed: Mapping[int, list[RunResult]],
    out: Path | None,
) -> MethodComparison:
    """One method's runs over the seeds, and its means and spreads."""
    runs = tuple(by_seed[seed][index] for seed in seeds)
    if out is None:  # the run directories were in a temporary folder, removed now
        runs = tuple(replace(r, run_dir=None) for r in runs)
    means = [r.mean_test_acc for r in runs if r.mean_test_acc is not None]
    stds = [r.std_test_acc for r in runs if r.std_test_acc is not None]
    return MethodComparison(
        method=spec,
        runs=runs,
        seeds=tuple(seeds),
        mean_test_acc=float(np.mean(means)) if means else None,
        std_across_seeds=float(np.std(means, ddof=1)) if len(means) > 1 else None,
        std_across_clients=float(np.mean(stds)) if stds else None,
    )


def _loaded(splits: Sequence[Split], name: str, stream: bool) -> Sequence[Split]:
    """A list of splits loaded once on the CPU, so that every run reuses them: stacked
    into tensor pairs, or with ``stream`` a Dataset's labels read for streaming (anything
    else is left for ``run`` to refuse in its own words)."""
    if not isinstance(splits, list):
        return splits
    cpu = torch.device("cpu")
    loaded = (samples(s, f"{name}[{k}]", cpu, stream) for k, s in enumerate(splits))
    return [data if isinstance(data, StreamedData) else (data.x, data.y) for data in loaded]


def _resumable(out: str | Path | None, overwrite: bool, seeds: list[int]) -> Path:
    """The folder ``resume`` continues; ValueError, before anything runs, for a folder that
    holds something else (a file, a run that is no cf.compare comparison)."""
    if out is None:
        raise ValueError("resume needs out, the folder of the comparison to continue")
    if overwrite:
        raise ValueError("resume keeps the comparison held by out, overwrite deletes it: pick one")
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"out {folder} is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / SEEDS_FILE).exists():
        raise ValueError(f"out {folder} holds no comparison of cf.compare to resume")
    return folder


def _kept(
    folder: Path,
    resolved: Mapping[tuple[int, str], MethodSpec],
    train: Sequence[Split],
    val: Sequence[Split] | None,
    test: Sequence[Split],
    val_fraction: float | None,
    stream: bool,
) -> dict[tuple[int, str], RunResult]:
    """The finished runs ``folder`` holds of the same settings and data sizes, by (seed,
    method): what a resumed comparison reads back instead of running."""
    kept = {}
    for (seed, spec), method in resolved.items():
        splits = client_splits(train, val, test, torch.device("cpu"), val_fraction, seed, stream)
        wanted = method.config.model_dump(mode="json") | {"data": user_data(splits)}
        finished = _finished(folder / seed_folder(seed) / safe_name(spec), wanted)
        if finished is not None:
            kept[seed, spec] = finished
    return kept


def _finished(run_dir: Path, wanted: dict[str, Any]) -> RunResult | None:
    """The run ``run_dir`` holds when it finished with the ``wanted`` settings; ConfigError
    when it ran with others (finished_summary's rule, as ``--resume``'s)."""
    try:
        summary = finished_summary(run_dir, wanted)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if summary is None:
        return None
    return RunResult.from_records(summary, read_run(run_dir), run_dir)


@contextlib.contextmanager
def _out_dir(out: str | Path | None, overwrite: bool, resume: bool) -> Iterator[Path]:
    """``out`` claimed for a new comparison (kept as it is to resume one), or a temporary
    folder removed afterwards."""
    if out is not None:
        folder = Path(out) if resume else claim_output_dir(Path(out), overwrite)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="collabfl-compare-") as temporary:
        yield Path(temporary)
