"""``compare``: several methods over several seeds on the user's own model and data, with
the outputs ``collabfl compare --seeds`` writes (results table, plots, summaries)."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from collabfl.api.data import Split, samples
from collabfl.api.methods import MethodLike, method_spec
from collabfl.api.results import Comparison, MethodComparison, RunResult
from collabfl.api.runner import ConfigSource, Overrides, client_count, resolve_spec, run
from collabfl.engine.experiment import seed_folder, write_seed_outputs
from collabfl.engine.recording import safe_name
from collabfl.engine.report.comparison import write_comparison
from collabfl.engine.report.run_dir import SEEDS_FILE, claim_output_dir
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
    accuracy_vs_variance.png) at the top.
    """
    specs = [method_spec(m) for m in methods]
    plan = _checked_plan(specs, seeds)
    code = {"model.name": model, "training.loss": loss, "training.optimizer": optimizer}
    chosen: dict[str, Any] = {"rounds": rounds, "epochs": epochs, "lr": lr}
    chosen |= {"batch_size": batch_size, "device": device}
    for spec in specs:  # every spec and setting, before anything runs
        for seed in plan:
            settings = {**chosen, "seed": seed}
            resolve_spec(spec, config, overrides, settings, code, client_count(train))
    train, test = _loaded(train, "train", stream), _loaded(test, "test", stream)
    val = None if val is None else _loaded(val, "val", False)
    by_seed: dict[int, list[RunResult]] = {}
    with _out_dir(out, overwrite) as folder:
        write_text(folder / SEEDS_FILE, json.dumps({"seeds": plan, "methods": specs}) + "\n")
        for seed in plan:
            seed_dir = folder / seed_folder(seed)
            by_seed[seed] = [
                run(
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


@contextlib.contextmanager
def _out_dir(out: str | Path | None, overwrite: bool) -> Iterator[Path]:
    """``out`` claimed for a new comparison, or a temporary folder removed afterwards."""
    if out is not None:
        folder = claim_output_dir(Path(out), overwrite)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="collabfl-compare-") as temporary:
        yield Path(temporary)
