"""The built-in methods' builders (engine/builtin_methods.py names them), and
``build_method``: a spec → its configured Method, through the registry.

A builder turns a resolved spec and the federation it will run on (sample counts, the
shared initial model, what clients reported) into a configured ``strategies`` Method.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from collabfl.engine.builtin_methods import BuiltBy
from collabfl.engine.config import ConfigError, FedCollabConfig, budget_peers, scores_local
from collabfl.engine.methods import MethodSpec
from collabfl.engine.registry import REGISTRY, FederationContext
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import head_parameters
from collabfl.strategies.attacks import Attackers
from collabfl.strategies.distances import DistanceSettings
from collabfl.strategies.ditto import Ditto
from collabfl.strategies.dpfl import DPFL, GraphRule
from collabfl.strategies.equilibrium_method import CollaborationEquilibrium
from collabfl.strategies.fedavg import FedAvg
from collabfl.strategies.fedcollab_method import FedCollab
from collabfl.strategies.ipfl import ClientProfile
from collabfl.strategies.ipfl_method import IPFL
from collabfl.strategies.local import Local
from collabfl.strategies.pfedgraph import default_alpha
from collabfl.strategies.pfedgraph_method import PFedGraph
from collabfl.strategies.robust import Aggregation
from collabfl.strategies.rounds import Method
from collabfl.strategies.spo import SpoSettings
from collabfl.strategies.spo_federated import SpoSearch


def build_method(
    spec: MethodSpec,
    sample_counts: Mapping[int, int],
    workspace: FlatModel,
    reported: Mapping[int, Mapping[str, float]] | None = None,
) -> Method:
    """The strategy object for a spec, resolved for the clients (their sample counts and,
    for iPFL, what they reported) and the model in ``workspace`` (the shared initial model).
    A built-in method is built by the function of this module its registry entry names.
    """
    federation = FederationContext(sample_counts, workspace, reported or {})
    build = REGISTRY.entry(spec.name).build
    if isinstance(build, BuiltBy):
        built: Method = globals()[build.function](spec, federation, **build.options)
        return built
    return build(spec, federation)


def _attackers(spec: MethodSpec, num_clients: int) -> Attackers:
    """The clients that upload poisoned models (``attack.*``) in this run."""
    config = spec.config
    kind = None if config.attack.kind == "none" else config.attack.kind
    return Attackers.chosen(kind, config.attack.fraction, num_clients, config.seed)


def local(spec: MethodSpec, federation: FederationContext) -> Local:
    return Local(spec.config.epochs, name=spec.label)


def fedavg(
    spec: MethodSpec, federation: FederationContext, *, prox: bool, finetune: bool
) -> FedAvg:
    """FedAvg and its variants: a proximal term (FedProx) and/or a fine-tuning round."""
    config = spec.config
    return FedAvg(
        config.epochs,
        prox_mu=config.fedprox.mu if prox else 0.0,
        finetune_epochs=(config.finetune.epochs or 2 * config.epochs) if finetune else 0.0,
        attackers=_attackers(spec, len(federation.sample_counts)),
        aggregation=_aggregation(spec),
        name=spec.label,
    )


def ditto(spec: MethodSpec, federation: FederationContext) -> Ditto:
    options = spec.config.ditto
    return Ditto(spec.config.epochs, options.lam, aggregation=_aggregation(spec), name=spec.label)


def _aggregation(spec: MethodSpec) -> Aggregation:
    """The config's rule for combining uploads (strategies/robust.py)."""
    return Aggregation(**spec.config.aggregation.model_dump())


def dpfl(spec: MethodSpec, federation: FederationContext, *, graph: GraphRule) -> DPFL:
    """DPFL with the paper's graph construction (``ggc``) or its random-graph ablation."""
    options = spec.config.dpfl
    budget = budget_peers(
        options.budget,
        len(federation.sample_counts),
        "dpfl.budget",
        counts_owner=options.budget_counts_owner,
    )
    return DPFL(
        epochs=spec.config.epochs,
        init_epochs=options.init_epochs,
        budget=budget,
        select_every=options.select_every,
        collaborate_every=options.collaborate_every,
        tie=options.ggc_tie,
        peers_on=options.peers_on,
        reward_samples=options.reward_samples,
        batched_rewards=options.batched_rewards,
        graph=graph,
        score_local=scores_local(spec.config, "dpfl" if graph == "ggc" else "dpfl_random"),
        name=spec.label,
    )


def pfedgraph(spec: MethodSpec, federation: FederationContext) -> PFedGraph:
    options = spec.config.pfedgraph
    workspace = federation.workspace
    num_clients = len(federation.sample_counts)
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
        attackers=_attackers(spec, num_clients),
        score_local=scores_local(spec.config, "pfedgraph"),
        local_steps=options.local_steps,
        aggregation=_aggregation(spec),
        name=spec.label,
    )


def ipfl(spec: MethodSpec, federation: FederationContext) -> IPFL:
    """The market, with profiles from the role shares, overridden by what clients reported."""
    options = spec.config.ipfl
    sample_counts, reported = federation.sample_counts, federation.reported
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
            attacker = roles.get(k) == "attacker"
            profiles[k] = ClientProfile(
                sample_counts[k], cost, eagerness, "attacker" if attacker else None
            )
        except ValueError as error:
            raise ConfigError(f"client {k} reported an invalid iPFL profile: {error}") from None
    attackers = frozenset(k for k, role in roles.items() if role == "attacker")
    return IPFL(
        epochs=spec.config.epochs,
        initial_model=federation.workspace.get().cpu().numpy(),
        profiles=profiles,
        lam=options.lam,
        eta=options.eta,
        distance=options.distance,
        attackers=Attackers("gaussian", attackers) if attackers else Attackers(),
        name=spec.label,
    )


class _CoalitionTrainers:
    """What a coalition method trains each coalition with: the configured base method for
    a coalition of several clients, local training for a singleton."""

    def __init__(self, spec: MethodSpec, base_name: str, federation: FederationContext) -> None:
        if spec.config.attack.kind != "none":
            raise ConfigError(f"{spec.name} does not support simulated attacks (attack.kind)")
        self.spec = spec
        self.base_spec = MethodSpec(spec.label, base_name, spec.config)
        self.federation = federation

    def base(self, members: Sequence[int]) -> Method:
        counts = {k: self.federation.sample_counts.get(k, 1) for k in members}
        return build_method(self.base_spec, counts, self.federation.workspace)

    def single(self, members: Sequence[int]) -> Method:
        return Local(self.spec.config.epochs, name=self.spec.label)


def fedcollab(spec: MethodSpec, federation: FederationContext) -> FedCollab:
    options = spec.config.fedcollab
    trainers = _CoalitionTrainers(spec, options.base, federation)
    return FedCollab(
        trainers.base,
        trainers.single,
        c=options.c,
        distance=distance_settings(options),
        restarts=options.restarts,
        seed=spec.config.seed,
        name=spec.label,
    )


def equilibrium(spec: MethodSpec, federation: FederationContext) -> CollaborationEquilibrium:
    options = spec.config.equilibrium
    trainers = _CoalitionTrainers(spec, options.base, federation)
    spo = None
    if options.ocs == "spo":
        settings = SpoSettings(
            hidden=options.spo_hidden,
            hypernet_steps=options.spo_hypernet_steps,
            hypernet_lr=options.spo_hypernet_lr,
            search_steps=options.spo_search_steps,
            search_lr=options.spo_search_lr,
            threshold=options.spo_threshold,
            start_ray=options.spo_start_ray,
            upper_clip=options.spo_upper_clip,
        )
        initial = federation.workspace.get()
        spo = SpoSearch(initial, settings, options.spo_batch_size, spec.config.seed)
    return CollaborationEquilibrium(
        trainers.base,
        trainers.single,
        init_epochs=options.init_epochs,
        budget=budget_peers(options.budget, len(federation.sample_counts), "equilibrium.budget"),
        spo=spo,
        name=spec.label,
    )


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
        eval_every=options.distance_eval_every,
        scale_label=options.distance_scale_label,
    )
