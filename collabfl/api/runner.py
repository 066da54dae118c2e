"""``run``: one method on the user's own model, data, loss and optimiser, in this process."""

from __future__ import annotations

import contextlib
import copy
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from collabfl.api.data import Split, client_splits
from collabfl.api.methods import MethodLike, method_spec
from collabfl.api.results import RunResult
from collabfl.client.node import ClientSplits
from collabfl.engine.config import (
    ExperimentConfig,
    check_compute,
    load_config,
    model_name,
    parse_override,
    set_value,
    validate_config,
)
from collabfl.engine.driver import AfterRound
from collabfl.engine.experiment import resolve_device, run_on_splits
from collabfl.engine.methods import MethodSpec, parse_method_spec, spec_options
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
    method: MethodLike,
    model: ModelFactory | nn.Module | str,
    train: Sequence[Split],
    val: Sequence[Split] | None,
    test: Sequence[Split],
    *,
    rounds: int | None = None,
    seed: int | None = None,
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
    out: str | Path | None = None,
    overwrite: bool = False,
    on_round: RoundHook | None = None,
) -> RunResult:
    """Run ``method`` (a spec such as ``"dpfl:budget=2"``, or ``cf.DPFL(budget=2)``) on
    clients 0..N-1 in this process.

    ``rounds``, ``seed``, ``epochs`` (local epochs per round), ``lr`` and ``batch_size`` (the
    default SGD's; a callable ``optimizer`` sets its own lr) and ``device`` (``"cpu"``,
    ``"cuda:0"``...) set those config keys; None keeps the config's value.
    ``val_fraction``: with ``val=None``, each client's validation split is that share of its
    train split, drawn with the run's seed (the rest stays for training).
    ``stream``: Dataset train and test splits stay in their Datasets and are read a batch
    at a time (for data that does not fit in memory; transforms then apply at every read);
    without it every split is stacked into tensors once, which is faster.

    ``model``: a function of no arguments returning a fresh ``torch.nn.Module`` (seeded, so
    every client starts from the same weights), a module instance (a copy of its weights is
    every client's initial model, whatever the seed), an import path ``"pkg.mod:factory"``,
    or a zoo model name. ``train``/``val``/``test``: one split per client each (a map-style
    Dataset of (input, label) pairs, or arrays ``(x, y)``); labels are class indices.
    ``loss``: (outputs, labels) → mean batch loss (default cross-entropy). ``optimizer``:
    the model's parameters → a ``torch.optim`` optimiser, or (optimiser, LR schedule)
    (default: the config's SGD); a string is an import path. ``overrides``: dotted config
    keys, e.g. ``{"rounds": 10, "dpfl.budget": 2}``, or CLI-style ``["rounds=10"]``; keys
    that cannot apply to the user's data (``method``, ``data.*``...) are refused, and so is
    a key the method spec sets to another value. The run's record describes the user's data
    ("user data", the clients and their split sizes). ``out``: write the run directory there
    (refused if it holds a run, unless ``overwrite``). Raises ValueError (ConfigError,
    UserCodeError) with one message on bad input, before any training, and RunFailed when a
    step failed on every client (user code that raises when it runs, say).
    """
    _check_objective(loss, optimizer)
    chosen: dict[str, Any] = {"rounds": rounds, "seed": seed, "epochs": epochs, "lr": lr}
    chosen |= {"batch_size": batch_size, "device": device}
    named_code = {"model.name": model, "training.loss": loss, "training.optimizer": optimizer}
    spec = resolve_spec(method, config, overrides, chosen, named_code, client_count(train))
    settings = spec.config
    compute = resolve_device(settings.device)
    check_compute(settings, compute)
    splits = client_splits(train, val, test, compute, val_fraction, settings.seed, stream)
    named = objective_from_names(settings.training.loss, settings.training.optimizer)
    objective = Objective(
        loss if callable(loss) else named.loss,
        optimizer if callable(optimizer) else named.optimizer,
    )
    if isinstance(model, str):
        num_classes = 1 + max(int(split.y.max()) for s in splits for split in _all(s))
        module = build_model(model_name(settings), num_classes, settings.seed)
        model_label = model_name(settings)
    elif isinstance(model, nn.Module):  # an instance: its weights are the initial model
        model_label = f"{_describe(type(model))} (an instance)"
        module = copy.deepcopy(model)
    else:
        model_label = _describe(model)
        module = seeded_module(model, settings.seed, model_label)
    _check_outputs(module, splits, per_class=objective.loss is F.cross_entropy)
    given = {
        "data": f"{len(splits)} clients' splits given to collabfl.api.run"
        + (", Dataset train and test inputs read a batch at a time" if stream else ""),
        "model": model_label,
        "loss": loss if isinstance(loss, str) else _describe(objective.loss),
        "optimizer": _describe(objective.optimizer) if callable(optimizer) else "config",
    }
    hook = _after_round(on_round)
    with _threads(settings.threads), _run_dir(out, overwrite) as run_dir:
        summary = run_on_splits(
            spec,
            splits,
            module,
            objective,
            compute,
            run_dir,
            model_label,
            hook,
            given,
            data=user_data(splits),
        )
        records = read_run(run_dir)
    if summary["status"] == "failed":
        raise RunFailed(f"the run failed: {summary['message']}")
    return RunResult.from_records(summary, records, None if out is None else Path(out))


def resolve_spec(
    method: MethodLike,
    config: ConfigSource,
    overrides: Overrides | None,
    chosen: Mapping[str, Any],
    named_code: Mapping[str, object],
    num_clients: int,
) -> MethodSpec:
    """The validated spec of ``method`` on ``num_clients`` of the user's clients: the config,
    the overrides, the keyword settings (``chosen``) and the user code named by import path
    (``named_code``: config key → what was given); ConfigError/ValueError in one line."""
    text = method_spec(method)
    raw = _raw_config(config)
    for key, value in applicable_overrides(text, overrides, chosen).items():
        set_value(raw, key.split("."), value, f"overrides[{key!r}]")
    for key, choice in named_code.items():
        if isinstance(choice, str):
            set_value(raw, key.split("."), choice, key)
    set_value(raw, ["data", "num_clients"], num_clients, "data.num_clients")
    return parse_method_spec(text, validate_config(raw))


Overrides = Mapping[str, Any] | Sequence[str]
"""Config keys to set: dotted keys and values, or ``"key=value"`` strings as on the CLI."""

NOT_FOR_USER_DATA = {
    "method": "the method is run's first argument",
    "methods": "compare's methods are its first argument",
    "jobs": "the Python API runs one method at a time in this process",
    "data": "data.* describes the built-in datasets; it cannot apply to your own splits",
    "tracking": "the Python API writes no tracking files; use on_round",
}
"""Config keys that mean nothing for a run on the user's own data, and why."""


SETTINGS = {
    "rounds": "rounds",
    "seed": "seed",
    "epochs": "epochs",
    "lr": "training.lr",
    "batch_size": "training.batch_size",
    "device": "device",
}
"""run's keyword arguments and the config keys they set."""


def applicable_overrides(
    method: str, overrides: Overrides | None, chosen: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``overrides`` and the ``chosen`` keyword settings as dotted keys and values;
    ValueError for a key that cannot apply to a run on the user's data, or that two of the
    method spec, the keywords and the overrides set to different values."""
    given = _as_mapping(overrides)
    for argument, value in (chosen or {}).items():
        key = SETTINGS[argument]
        if value is None:
            continue
        if key in given and given[key] != value:
            raise ValueError(
                f"{key} is set both as {argument}={value!r} and in overrides "
                f"({given[key]!r}); set it in one place"
            )
        given[key] = value
    for key in given:
        reason = NOT_FOR_USER_DATA.get(key.split(".")[0])
        if reason is not None:
            raise ValueError(f"overrides[{key!r}]: {reason}")
    _, options = spec_options(method)
    for option in options:
        path, value = parse_override(option)
        key = ".".join(path)
        if key in given and given[key] != value:
            raise ValueError(
                f"{key} is set in both the method spec {method!r} ({value!r}) and overrides "
                f"({given[key]!r}); set it in one place"
            )
    return given


def _as_mapping(overrides: Overrides | None) -> dict[str, Any]:
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(key): value for key, value in overrides.items()}
    if isinstance(overrides, str) or not isinstance(overrides, Sequence):
        kind = type(overrides).__name__
        raise ValueError(f"overrides must be a dict or a list of 'key=value' strings, got a {kind}")
    pairs = (parse_override(str(text)) for text in overrides)
    return {".".join(path): value for path, value in pairs}


def client_count(train: Sequence[Split]) -> int:
    """How many clients ``train`` lists, at least 1 (client_splits says what is wrong)."""
    listed = isinstance(train, Sequence) and not isinstance(train, tuple)
    return max(1, len(train) if listed else 1)


def user_data(splits: list[ClientSplits]) -> dict[str, Any]:
    """The run record's ``data``: the user's clients and their split sizes, never the
    built-in dataset's defaults the run did not use."""
    return {
        "dataset": "user data",
        "num_clients": len(splits),
        "partition": "as given",
        **{
            f"{name}_samples": [len(getattr(s, name).y) for s in splits]
            for name in ("train", "val", "test")
        },
    }


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


def _check_objective(loss: object, optimizer: object) -> None:
    """Refuse a loss or optimiser given in a shape the run would misuse, before anything
    runs: an optimiser instance is bound to other parameters than every client's model, and
    a loss class called with (outputs, labels) builds a module instead of a loss."""
    if isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f"optimizer is an {type(optimizer).__name__} instance, bound to one set of "
            "parameters; pass a factory that builds one for each client's model, e.g. "
            f"optimizer=lambda params: torch.optim.{type(optimizer).__name__}(params, lr=...)"
        )
    if optimizer is not None and not callable(optimizer) and not isinstance(optimizer, str):
        raise ValueError(
            f"optimizer must be a factory (params -> optimiser) or an import path, "
            f"got {type(optimizer).__name__}"
        )
    if isinstance(loss, type):
        raise ValueError(
            f"loss is the class {loss.__name__}, not a loss; pass an instance "
            f"(loss={loss.__name__}()) or a function (outputs, labels) -> mean loss"
        )
    if loss is not None and not callable(loss) and not isinstance(loss, str):
        raise ValueError(
            f"loss must be a function (outputs, labels) -> mean loss or an import path, "
            f"got {type(loss).__name__}"
        )


def _check_outputs(module: nn.Module, splits: list[ClientSplits], *, per_class: bool) -> None:
    """Every client's every split goes through the model once before training, so one whose
    inputs do not fit is refused by name instead of dropped mid-run; with cross-entropy
    (``per_class``) the outputs must also hold one score per class."""
    top = max(int(split.y.max()) for s in splits for split in _all(s))
    module.eval()
    for k, client in enumerate(splits):
        for name, split in zip(("train", "val", "test"), _all(client), strict=True):
            if len(split) == 0:
                continue
            first = split.inputs(slice(0, 1))
            try:
                with torch.no_grad():
                    outputs = module.to(first.device)(first)
            except (RuntimeError, ValueError, TypeError, IndexError) as e:
                raise ValueError(
                    f"client {k}'s {name} inputs of shape {tuple(first.shape[1:])} do not fit "
                    f"the model: {str(e).splitlines()[0]}"
                ) from None
            if per_class and (outputs.ndim != 2 or outputs.shape[1] <= top):
                raise ValueError(
                    f"the model maps client {k}'s {name} input of shape "
                    f"{tuple(first.shape[1:])} to outputs of shape {tuple(outputs.shape[1:])}; "
                    f"cross-entropy needs one output per class (labels go up to {top})"
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
