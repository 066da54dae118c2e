"""The built-in methods, registered by name: the registry reads this module the first time
it is asked for a method.

Each builder is imported from engine/builders.py only when a run builds its method: the
builders import the strategies and torch, which validating a config's method names must not
wait for. A method of your own registers here, or in a module this one imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from collabfl.engine.registry import REGISTRY, Builder

if TYPE_CHECKING:
    from collabfl.engine.methods import MethodSpec
    from collabfl.engine.registry import FederationContext
    from collabfl.strategies.rounds import Method


def _built_by(name: str, **options: Any) -> Builder:
    """The builder ``builders.name`` (called with ``options``), imported at its first build."""

    def build(spec: MethodSpec, federation: FederationContext) -> Method:
        from collabfl.engine import builders

        built: Method = getattr(builders, name)(spec, federation, **options)
        return built

    return build


REGISTRY.register("local", _built_by("local"), summary="each client trains on its own data alone")
REGISTRY.register(
    "fedavg",
    _built_by("fedavg", prox=False, finetune=False),
    coalition_base=True,
    summary="one shared model, the clients' updates averaged by sample count",
)
REGISTRY.register(
    "fedavg_ft",
    _built_by("fedavg", prox=False, finetune=True),
    section="finetune",
    summary="FedAvg, then each client fine-tunes the shared model on its own data",
)
REGISTRY.register(
    "fedprox",
    _built_by("fedavg", prox=True, finetune=False),
    section="fedprox",
    coalition_base=True,
    summary="FedAvg with a proximal term that keeps local training near the shared model",
)
REGISTRY.register(
    "fedprox_ft",
    _built_by("fedavg", prox=True, finetune=True),
    section="fedprox",
    summary="FedProx, then local fine-tuning",
)
REGISTRY.register(
    "ditto",
    _built_by("ditto"),
    section="ditto",
    coalition_base=True,
    cost=1.3,  # two models trained per client and round
    summary="a personal model per client, pulled toward a FedAvg model",
)
# Methods whose clients learn from each other (quorum=2): a round with one participant is
# no round.
REGISTRY.register(
    "dpfl",
    _built_by("dpfl", graph="ggc"),
    section="dpfl",
    coalition_base=True,
    quorum=2,
    cost=2.5,  # GGC's validation passes: about 2.5x Local in the quickstart
    summary="each client picks its own collaborators by randomized greedy search (GGC, BGGC)",
)
REGISTRY.register(
    "dpfl_random",
    _built_by("dpfl", graph="random"),
    section="dpfl",
    quorum=2,
    summary="DPFL with random collaborators of the same budget (an ablation)",
)
REGISTRY.register(
    "pfedgraph",
    _built_by("pfedgraph"),
    section="pfedgraph",
    quorum=2,
    summary="the coordinator infers a weighted collaboration graph with a small QP each round",
)
REGISTRY.register(
    "ipfl",
    _built_by("ipfl"),
    section="ipfl",
    quorum=2,
    summary="a model-sharing market: sharing costs, gains and payments decide who learns from whom",
)
REGISTRY.register(
    "fedcollab",
    _built_by("fedcollab"),
    section="fedcollab",
    quorum=2,
    summary="clients grouped into coalitions from estimated distances between their data",
)
REGISTRY.register(
    "equilibrium",
    _built_by("equilibrium"),
    section="equilibrium",
    quorum=2,
    summary="stable coalitions from the benefit graph's strongly connected components",
)
