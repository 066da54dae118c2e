"""The built-in methods: one row each, read by the registry (engine/registry.py) when it is
first imported.

A row names the method, the config section of its knobs and the function of
engine/builders.py that builds it, with that function's options. The rows are data, so this
module imports nothing of collabfl: config validation reads the names without importing any
strategy or torch, and the registry needs no import of a module above it to fill itself.
``build_method`` (engine/builders.py) calls the named builder when a run builds the method.
A method of your own is a row here and its builder in engine/builders.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BuiltBy:
    """A builder of engine/builders.py, by name, and the options it is called with."""

    function: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Builtin:
    """A built-in method's registry entry (see engine/registry.py MethodEntry)."""

    name: str
    build: BuiltBy
    section: str | None = None
    coalition_base: bool = False
    summary: str = ""
    quorum: int = 1
    cost: float = 1.0


BUILTINS: tuple[Builtin, ...] = (
    Builtin("local", BuiltBy("local"), summary="each client trains on its own data alone"),
    Builtin(
        "fedavg",
        BuiltBy("fedavg", {"prox": False, "finetune": False}),
        coalition_base=True,
        summary="one shared model, the clients' updates averaged by sample count",
    ),
    Builtin(
        "fedavg_ft",
        BuiltBy("fedavg", {"prox": False, "finetune": True}),
        section="finetune",
        summary="FedAvg, then each client fine-tunes the shared model on its own data",
    ),
    Builtin(
        "fedprox",
        BuiltBy("fedavg", {"prox": True, "finetune": False}),
        section="fedprox",
        coalition_base=True,
        summary="FedAvg with a proximal term that keeps local training near the shared model",
    ),
    Builtin(
        "fedprox_ft",
        BuiltBy("fedavg", {"prox": True, "finetune": True}),
        section="fedprox",
        summary="FedProx, then local fine-tuning",
    ),
    Builtin(
        "ditto",
        BuiltBy("ditto"),
        section="ditto",
        coalition_base=True,
        cost=1.3,  # two models trained per client and round
        summary="a personal model per client, pulled toward a FedAvg model",
    ),
    # Methods whose clients learn from each other (quorum=2): a round with one participant is
    # no round.
    Builtin(
        "dpfl",
        BuiltBy("dpfl", {"graph": "ggc"}),
        section="dpfl",
        coalition_base=True,
        quorum=2,
        cost=2.5,  # GGC's validation passes: about 2.5x Local in the quickstart
        summary="each client picks its own collaborators by randomized greedy search (GGC, BGGC)",
    ),
    Builtin(
        "dpfl_random",
        BuiltBy("dpfl", {"graph": "random"}),
        section="dpfl",
        quorum=2,
        summary="DPFL with random collaborators of the same budget (an ablation)",
    ),
    Builtin(
        "pfedgraph",
        BuiltBy("pfedgraph"),
        section="pfedgraph",
        quorum=2,
        summary="the coordinator infers a weighted collaboration graph with a small QP each round",
    ),
    Builtin(
        "ipfl",
        BuiltBy("ipfl"),
        section="ipfl",
        quorum=2,
        summary=(
            "a model-sharing market: sharing costs, gains and payments decide who learns from whom"
        ),
    ),
    Builtin(
        "fedcollab",
        BuiltBy("fedcollab"),
        section="fedcollab",
        quorum=2,
        summary="clients grouped into coalitions from estimated distances between their data",
    ),
    Builtin(
        "equilibrium",
        BuiltBy("equilibrium"),
        section="equilibrium",
        quorum=2,
        summary="stable coalitions from the benefit graph's strongly connected components",
    ),
)
"""In the order `collabfl methods` and the error messages list them."""
