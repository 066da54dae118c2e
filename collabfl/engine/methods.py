"""Method specs ("dpfl:budget=0.1"), parsed and checked against the registry; engine/builders.py
builds the Method a spec names (``build_method``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from collabfl.engine.config import (
    ConfigError,
    ExperimentConfig,
    apply_overrides,
    validate_config,
)
from collabfl.engine.quorum import run_quorum
from collabfl.engine.registry import REGISTRY
from collabfl.engine.run_options import RunOptions


@dataclass(frozen=True)
class MethodSpec:
    """A method name with per-method overrides, as written on the command line."""

    label: str
    name: str
    config: ExperimentConfig


def parse_method_spec(text: str, base: ExperimentConfig) -> MethodSpec:
    """Parse ``name`` or ``name:key=value,key=value`` against the base config.

    Bare keys go to the method's own section (``dpfl:budget=5`` sets dpfl.budget), or for a
    method without one are top-level settings (``local:epochs=2``); dotted keys are full
    paths (``ditto:training.lr=0.01``). A bare key the method does not have is refused with
    the methods that have it.
    """
    name, options = spec_options(text)
    raw = apply_overrides(base.model_dump(mode="json"), options)
    raw["method"] = name
    return MethodSpec(text.strip(), name, validate_config(raw))


def spec_options(text: str) -> tuple[str, list[str]]:
    """A spec's method name and its options as dotted ``key=value`` overrides; ConfigError
    for an unknown method or a bare option the method does not have (saying whose it is)."""
    name, _, options = text.strip().partition(":")
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}; choose from {REGISTRY.choices()}")
    section = REGISTRY.entry(name).section
    dotted = []
    for option in filter(None, (o.strip() for o in options.split(","))):
        key = option.split("=", 1)[0].strip()
        if "." in key or (section is None and key in _GENERAL_KEYS):
            pass  # a full path (``local:epochs=2`` is one: local has no section)
        else:
            _check_own_option(name, section, key)
            option = f"{section}.{option}"
        dotted.append(option)
    return name, dotted


def _check_own_option(method: str, section: str | None, key: str) -> None:
    """A bare option must be one of the method's own knobs; else say which method has it."""
    own = _section_keys(section)
    if key in own:
        return
    owners = [
        e.name for e in map(REGISTRY.entry, REGISTRY.names()) if key in _section_keys(e.section)
    ]
    whose = f"; {key} belongs to {', '.join(owners)}" if owners else ""
    if not own:
        lead = f"{method} takes no options of its own (got {key!r})"
    else:
        lead = f"{method} has no option {key!r} (its options: {', '.join(own)})"
    raise ConfigError(
        f"{lead}{whose}; other keys take their full path, e.g. {method}:training.lr=0.01"
    )


_GENERAL_KEYS = frozenset(
    name
    for name, field in ExperimentConfig.model_fields.items()
    if not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel)
)
"""The config's top-level settings (rounds, epochs, seed...), not its sections."""


def _section_keys(section: str | None) -> list[str]:
    """The knobs of a config section (none for None)."""
    if section is None:
        return []
    model = ExperimentConfig.model_fields[section].annotation
    return list(getattr(model, "model_fields", {}))


def run_request(spec: MethodSpec, options: RunOptions) -> dict[str, Any]:
    """What the coordinator service stores for a new run and its ServerApp reads back."""
    return {"experiment": spec.config.model_dump(mode="json"), **options.to_request()}


def read_run_request(method: str, request: Mapping[str, Any]) -> tuple[MethodSpec, RunOptions]:
    """The method and options of a stored run request (``run_request``'s inverse).

    ConfigError names what is wrong: an unknown key, a missing or invalid experiment config,
    an unknown method or a mistyped option.
    """
    unknown = sorted(set(request) - {"experiment", *RunOptions.request_keys()})
    if unknown:
        raise ConfigError(f"unknown run request keys {unknown}")
    experiment = request.get("experiment")
    if not isinstance(experiment, Mapping):
        raise ConfigError("a run request needs an 'experiment' object: the experiment config")
    spec = parse_method_spec(method, validate_config(dict(experiment)))
    try:
        options = RunOptions.from_request(request)
    except ValueError as error:
        raise ConfigError(f"invalid run option: {error}") from None
    # A quorum it can never reach: refused now.
    run_quorum(spec.name, spec.config.federation, options.expected_clients)
    return spec, options
