"""Method specs ("dpfl:budget=0.1") → configured Method objects from strategies/."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collabfl.coordinator.config import (
    METHOD_NAMES,
    ConfigError,
    ExperimentConfig,
    FedCollabConfig,
    apply_overrides,
    resolve_budget,
    validate_config,
)
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import head_parameters
from collabfl.strategies.attacks import Attackers
from collabfl.strategies.distances import DistanceSettings
from collabfl.strategies.ditto import Ditto
from collabfl.strategies.dpfl import DPFL
from collabfl.strategies.equilibrium_method import CollaborationEquilibrium
from collabfl.strategies.fedavg import FedAvg
from collabfl.strategies.fedcollab_method import FedCollab
from collabfl.strategies.ipfl import ClientProfile
from collabfl.strategies.ipfl_method import IPFL
from collabfl.strategies.local import Local
from collabfl.strategies.pfedgraph import default_alpha
from collabfl.strategies.pfedgraph_method import PFedGraph
from collabfl.strategies.rounds import Method
from collabfl.strategies.spo import SpoSettings
from collabfl.strategies.spo_federated import SpoSearch

SECTION_OF = {
    "local": None,
    "fedavg": None,
    "fedavg_ft": "finetune",
    "fedprox": "fedprox",
    "fedprox_ft": "fedprox",
    "ditto": "ditto",
    "dpfl": "dpfl",
    "dpfl_random": "dpfl",
    "pfedgraph": "pfedgraph",
    "ipfl": "ipfl",
    "fedcollab": "fedcollab",
    "equilibrium": "equilibrium",
}
"""Which config section a spec's bare ``key=value`` options belong to."""


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
    if name not in METHOD_NAMES:
        raise ConfigError(f"unknown method {name!r}; choose from {', '.join(METHOD_NAMES)}")
    overrides = []
    for option in filter(None, (o.strip() for o in options.split(","))):
        key = option.split("=", 1)[0]
        section = SECTION_OF[name]
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
    config = spec.config
    num_clients = len(sample_counts)
    epochs = config.epochs
    finetune = config.finetune.epochs or 2 * epochs
    attack = config.attack
    attackers = Attackers.chosen(
        None if attack.kind == "none" else attack.kind, attack.fraction, num_clients, config.seed
    )
    match spec.name:
        case "local":
            return Local(epochs, name=spec.label)
        case "fedavg" | "fedavg_ft" | "fedprox" | "fedprox_ft":
            return FedAvg(
                epochs,
                prox_mu=config.fedprox.mu if spec.name.startswith("fedprox") else 0.0,
                finetune_epochs=finetune if spec.name.endswith("_ft") else 0.0,
                attackers=attackers,
                name=spec.label,
            )
        case "ditto":
            return Ditto(epochs, lam=config.ditto.lam, name=spec.label)
        case "dpfl" | "dpfl_random":
            return DPFL(
                epochs=epochs,
                init_epochs=config.dpfl.init_epochs,
                budget=resolve_budget(config.dpfl.budget, num_clients),
                select_every=config.dpfl.select_every,
                graph="random" if spec.name == "dpfl_random" else "ggc",
                name=spec.label,
            )
        case "pfedgraph":
            return _pfedgraph(spec, num_clients, workspace, attackers)
        case "ipfl":
            return _ipfl(spec, sample_counts, workspace, reported or {})
        case "fedcollab" | "equilibrium":
            return _coalition_method(spec, sample_counts, workspace)
    raise ConfigError(f"unknown method {spec.name!r}")


def _coalition_method(
    spec: MethodSpec, sample_counts: Mapping[int, int], workspace: FlatModel
) -> FedCollab | CollaborationEquilibrium:
    """FedCollab or the equilibrium, with the base method built per coalition."""
    config = spec.config
    if config.attack.kind != "none":
        raise ConfigError(f"{spec.name} does not support simulated attacks (attack.kind)")
    base_name = config.fedcollab.base if spec.name == "fedcollab" else config.equilibrium.base

    def base(members: Sequence[int]) -> Method:
        counts = {k: sample_counts.get(k, 1) for k in members}
        return build_method(MethodSpec(spec.label, base_name, config), counts, workspace)

    def single(members: Sequence[int]) -> Method:
        return Local(config.epochs, name=spec.label)

    if spec.name == "equilibrium":
        options = config.equilibrium
        spo = None
        if options.ocs == "spo":
            settings = SpoSettings(
                hidden=options.spo_hidden,
                hypernet_steps=options.spo_hypernet_steps,
                hypernet_lr=options.spo_hypernet_lr,
                search_steps=options.spo_search_steps,
                search_lr=options.spo_search_lr,
                threshold=options.spo_threshold,
            )
            spo = SpoSearch(workspace.get(), settings, options.spo_batch_size, config.seed)
        return CollaborationEquilibrium(
            base,
            single,
            init_epochs=options.init_epochs,
            budget=resolve_budget(options.budget, len(sample_counts)),
            spo=spo,
            name=spec.label,
        )
    options = config.fedcollab
    return FedCollab(
        base,
        single,
        c=options.c,
        distance=distance_settings(options),
        restarts=options.restarts,
        seed=config.seed,
        name=spec.label,
    )


def _pfedgraph(
    spec: MethodSpec, num_clients: int, workspace: FlatModel, attackers: Attackers
) -> PFedGraph:
    options = spec.config.pfedgraph
    compare = (0, workspace.num_parameters)
    if options.similarity == "head":
        compare = (workspace.num_parameters - head_parameters(workspace.module), compare[1])
    return PFedGraph(
        epochs=spec.config.epochs,
        initial_model=workspace.get().cpu().numpy(),
        alpha=options.alpha or default_alpha(num_clients),
        lam=options.lam,
        regularizer=options.regularizer,
        compare=compare,
        attackers=attackers,
        name=spec.label,
    )


def _ipfl(
    spec: MethodSpec,
    sample_counts: Mapping[int, int],
    workspace: FlatModel,
    reported: Mapping[int, Mapping[str, float]],
) -> IPFL:
    options = spec.config.ipfl
    clients = sorted(sample_counts)
    order = np.random.default_rng([spec.config.seed, 0x1BF1]).permutation(clients)
    shares = {"attacker": options.attackers, "seller": options.sellers, "buyer": options.buyers}
    roles: dict[int, str] = {}
    start = 0
    for role, share in shares.items():
        count = round(share * len(clients))
        roles |= {int(k): role for k in order[start : start + count]}
        start += count
    profiles = {}
    for k in clients:
        cost, eagerness = options.cost, options.eagerness
        if roles.get(k) in ("attacker", "seller"):
            cost, eagerness = 0.0, 0.0
        elif roles.get(k) == "buyer":
            cost = math.inf
        cost = reported.get(k, {}).get("cost", cost)
        eagerness = reported.get(k, {}).get("eagerness", eagerness)
        try:
            role = "attacker" if roles.get(k) == "attacker" else None
            profiles[k] = ClientProfile(sample_counts[k], cost, eagerness, role)
        except ValueError as error:
            raise ConfigError(f"client {k} reported an invalid iPFL profile: {error}") from None
    attackers = frozenset(k for k, role in roles.items() if role == "attacker")
    return IPFL(
        epochs=spec.config.epochs,
        initial_model=workspace.get().cpu().numpy(),
        profiles=profiles,
        lam=options.lam,
        eta=options.eta,
        distance=options.distance,
        attackers=Attackers("gaussian", attackers) if attackers else Attackers(),
        name=spec.label,
    )


def run_request(
    spec: MethodSpec, expected_clients: int, out_dir: str = "", message_timeout: float = 600.0
) -> dict[str, Any]:
    """What the coordinator service stores for a new run and its ServerApp reads back."""
    return {
        "experiment": spec.config.model_dump(mode="json"),
        "expected_clients": expected_clients,
        "out_dir": out_dir,
        "message_timeout": message_timeout,
    }


def distance_settings(options: FedCollabConfig) -> DistanceSettings:
    """FedCollab's discriminator knobs (``distance_*``) as the estimator's settings."""
    return DistanceSettings(
        rounds=options.distance_rounds,
        local_steps=options.distance_local_steps,
        lr=options.distance_lr,
        batch_size=options.distance_batch_size,
        hidden=options.distance_hidden,
        patience=options.distance_patience,
        features=options.distance_features,
    )
