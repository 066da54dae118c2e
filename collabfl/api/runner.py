"""``run``: one method on the user's own model, data, loss and optimiser, in this process."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from collabfl.api.data import Split, client_splits
from collabfl.api.results import RunResult
from collabfl.client.node import ClientSplits
from collabfl.engine.config import (
    ExperimentConfig,
    load_config,
    model_name,
    set_value,
    validate_config,
)
from collabfl.engine.driver import AfterRound
from collabfl.engine.experiment import resolve_device, run_on_splits
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.report.run_dir import claim_output_dir, read_run
from collabfl.engine.step_failures import RunFailed
from collabfl.kernel.models import ModelFactory, build_model, seeded_module
from collabfl.kernel.objective import LossFn, Objective, OptimizerFactory, objective_from_names

ConfigSource = ExperimentConfig | Mapping[str, Any] | str | Path | None
"""A config as a validated object, a nested dict (as TOML would give), a TOML file's path,
or None for the defaults."""

RoundHook = Callable[[int, list[dict[str, Any]]], None]
"""Called after every round with its index and its metrics rows (one per client)."""


def run(
    method: str,
    model: ModelFactory | str,
    train: Sequence[Split],
    val: Sequence[Split],
    test: Sequence[Split],
    *,
    loss: LossFn | str | None = None,
    optimizer: OptimizerFactory | str | None = None,
    config: ConfigSource = None,
    overrides: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    on_round: RoundHook | None = None,
) -> RunResult:
    """Run ``method`` (a spec such as ``"dpfl:budget=2"``) on clients 0..N-1 in this process.

    ``model``: a function of no arguments returning a fresh ``torch.nn.Module`` (seeded, so
    every client starts from the same weights), an import path ``"pkg.mod:factory"``, or a
    zoo model name. ``train``/``val``/``test``: one split per client each (a map-style
    Dataset of (input, label) pairs, or arrays ``(x, y)``); labels are class indices.
    ``loss``: (outputs, labels) → mean batch loss (default cross-entropy). ``optimizer``:
    the model's parameters → a ``torch.optim`` optimiser, or (optimiser, LR schedule)
    (default: the config's SGD); a string is an import path. ``overrides``: dotted config
    keys, e.g. ``{"rounds": 10, "dpfl.budget": 2}``. ``out``: write the run directory there
    (refused if it holds a run, unless ``overwrite``). Raises ValueError (ConfigError,
    UserCodeError) with one message on bad input, before any training, and RunFailed when a
    step failed on every client (user code that raises when it runs, say).
    """
    raw = _raw_config(config)
    for key, value in (overrides or {}).items():
        set_value(raw, key.split("."), value, f"overrides[{key!r}]")
    for key, choice in (("model.name", model), ("training.loss", loss)):
        if isinstance(choice, str):
            set_value(raw, key.split("."), choice, key)
    if isinstance(optimizer, str):
        set_value(raw, ["training", "optimizer"], optimizer, "training.optimizer")
    device = resolve_device(validate_config(raw).device)
    splits = client_splits(train, val, test, device)
    set_value(raw, ["data", "num_clients"], len(splits), "data.num_clients")
    spec = parse_method_spec(method, validate_config(raw))
    settings = spec.config
    named = objective_from_names(settings.training.loss, settings.training.optimizer)
    objective = Objective(
        loss if callable(loss) else named.loss,
        optimizer if callable(optimizer) else named.optimizer,
    )
    if isinstance(model, str):
        num_classes = 1 + max(int(split.y.max()) for s in splits for split in _all(s))
        module = build_model(model_name(settings), num_classes, settings.seed)
        model_label = model_name(settings)
    else:
        model_label = _describe(model)
        module = seeded_module(model, settings.seed, model_label)
    if objective.loss is F.cross_entropy:
        _check_outputs(module, splits)
    given = {
        "data": f"{len(splits)} clients' splits given to collabfl.api.run",
        "model": model_label,
        "loss": loss if isinstance(loss, str) else _describe(objective.loss),
        "optimizer": _describe(objective.optimizer) if callable(optimizer) else "config",
    }
    hook = _after_round(on_round)
    with _threads(settings.threads), _run_dir(out, overwrite) as run_dir:
        summary = run_on_splits(
            spec, splits, module, objective, device, run_dir, model_label, hook, given
        )
        records = read_run(run_dir)
    if summary["status"] == "failed":
        raise RunFailed(f"the run failed: {summary['message']}")
    return RunResult.from_records(summary, records, None if out is None else Path(out))


def _raw_config(config: ConfigSource) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, ExperimentConfig):
        return config.model_dump(mode="json")
    if isinstance(config, str | Path):
        return load_config(Path(config)).model_dump(mode="json")
    return _plain(config)


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of nested mappings, so overrides never write into the caller's dict."""
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in mapping.items()}


def _all(splits: ClientSplits) -> tuple[Any, ...]:
    return splits.train, splits.val, splits.test


def _check_outputs(module: nn.Module, splits: list[ClientSplits]) -> None:
    """Cross-entropy needs one output per class: say so before training, not mid-round."""
    first = splits[0].train
    with torch.no_grad():
        outputs = module.to(first.x.device).eval()(first.x[:1])
    top = max(int(split.y.max()) for s in splits for split in _all(s))
    if outputs.ndim != 2 or outputs.shape[1] <= top:
        raise ValueError(
            f"the model maps an input of shape {tuple(first.x.shape[1:])} to outputs of shape "
            f"{tuple(outputs.shape[1:])}; cross-entropy needs one output per class "
            f"(labels go up to {top})"
        )


def _describe(code: object) -> str:
    """A readable name of a user's callable for the run's config record."""
    module = getattr(code, "__module__", None)
    name = getattr(code, "__qualname__", None) or type(code).__qualname__
    return f"{module}:{name}" if module else str(name)


def _after_round(on_round: RoundHook | None) -> AfterRound:
    if on_round is None:
        return lambda outcome, rows: None
    return lambda outcome, rows: on_round(outcome.round, rows)


@contextlib.contextmanager
def _threads(threads: int) -> Iterator[None]:
    """torch's CPU threads as the config asks (0: as they are), restored afterwards: the
    caller's process is not ours to reconfigure."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _run_dir(out: str | Path | None, overwrite: bool) -> Iterator[Path]:
    """``out`` claimed for a new run, or a temporary folder removed afterwards."""
    if out is not None:
        yield claim_output_dir(Path(out), overwrite)
        return
    with tempfile.TemporaryDirectory(prefix="collabfl-api-") as folder:
        yield Path(folder)
