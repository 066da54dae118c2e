"""Method specs ("dpfl:budget=0.1") → configured Method objects through the registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collabfl.engine.config import (
    ConfigError,
    ExperimentConfig,
    apply_overrides,
    validate_config,
)
from collabfl.engine.quorum import run_quorum
from collabfl.engine.registry import REGISTRY, FederationContext
from collabfl.engine.run_options import RunOptions
from collabfl.kernel.flat import FlatModel
from collabfl.strategies.rounds import Method


@dataclass(frozen=True)
class MethodSpec:
    """A method name with per-method overrides, as written on the command line."""

    label: str
    name: str
    config: ExperimentConfig


def parse_method_spec(text: str, base: ExperimentConfig) -> MethodSpec:
    """Parse ``name`` or ``name:key=value,key=value`` against the base config.

    Bare keys go to the method's own section (``dpfl:budget=5`` sets dpfl.budget); dotted
    keys are full paths (``ditto:training.lr=0.01``).
    """
    name, _, options = text.strip().partition(":")
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}; choose from {REGISTRY.choices()}")
    section = REGISTRY.entry(name).section
    overrides = []
    for option in filter(None, (o.strip() for o in options.split(","))):
        key = option.split("=", 1)[0]
        if "." not in key and section is not None:
            option = f"{section}.{option}"
        overrides.append(option)
    raw = apply_overrides(base.model_dump(mode="json"), overrides)
    raw["method"] = name
    return MethodSpec(text.strip(), name, validate_config(raw))


def build_method(
    spec: MethodSpec,
    sample_counts: Mapping[int, int],
    workspace: FlatModel,
    reported: Mapping[int, Mapping[str, float]] | None = None,
) -> Method:
    """The strategy object for a spec, resolved for the clients (their sample counts and,
    for iPFL, what they reported) and the model in ``workspace`` (the shared initial model).
    """
    federation = FederationContext(sample_counts, workspace, reported or {})
    return REGISTRY.entry(spec.name).build(spec, federation)


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
    run_quorum(spec, options.expected_clients)  # a quorum it can never reach: refused now
    return spec, options
