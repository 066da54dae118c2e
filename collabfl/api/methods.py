"""Methods as typed objects: ``cf.DPFL(budget=3)`` is the spec ``"dpfl:budget=3"``.

An editor completes the options and a type checker checks them; an option left at None is
the config's value. Each object turns into the same method spec the command line takes, so
strings stay accepted everywhere a method is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import ClassVar, Literal

Budget = int | float | Literal["inf"]
"""Peers held at once: an integer from 1 to N-1, a fraction of N in (0, 1), or "inf"."""


@dataclass(frozen=True)
class Method:
    """A registered method and the options given for it (None: the config's value)."""

    name: ClassVar[str]

    @property
    def spec(self) -> str:
        """The method spec, as ``collabfl compare --methods`` takes it."""
        options = [
            f"{f.name}={_toml(getattr(self, f.name))}"
            for f in fields(self)
            if getattr(self, f.name) is not None
        ]
        return f"{self.name}:{','.join(options)}" if options else self.name

    def __str__(self) -> str:
        return self.spec


def _toml(value: object) -> str:
    """A value as a spec writes it (specs read values as TOML; bare words stay strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return str(value)


MethodLike = Method | str
"""A method as a typed object or a spec string (``"dpfl:budget=3"``)."""


def method_spec(method: MethodLike) -> str:
    """The spec string of a method given either way; TypeError for anything else."""
    if isinstance(method, Method):
        return method.spec
    if isinstance(method, str):
        return method
    kind = type(method).__name__
    raise TypeError(f"a method is a spec string or a method object (cf.DPFL...), got a {kind}")


@dataclass(frozen=True)
class Local(Method):
    """Every client trains alone."""

    name: ClassVar[str] = "local"


@dataclass(frozen=True)
class FedAvg(Method):
    """One global model averaged by sample count."""

    name: ClassVar[str] = "fedavg"


@dataclass(frozen=True)
class FedAvgFT(Method):
    """FedAvg, then a fine-tuning step on each client (``epochs``; default 2 × epochs)."""

    name: ClassVar[str] = "fedavg_ft"
    epochs: float | None = None


@dataclass(frozen=True)
class FedProx(Method):
    """FedAvg with a proximal term of weight ``mu``."""

    name: ClassVar[str] = "fedprox"
    mu: float | None = None


@dataclass(frozen=True)
class FedProxFT(FedProx):
    """FedProx, then a fine-tuning step on each client."""

    name: ClassVar[str] = "fedprox_ft"


@dataclass(frozen=True)
class Ditto(Method):
    """A personal model pulled towards the global one with weight ``lam``."""

    name: ClassVar[str] = "ditto"
    lam: float | None = None


@dataclass(frozen=True)
class DPFL(Method):
    """Each client picks its collaborators with GGC under ``budget`` peers."""

    name: ClassVar[str] = "dpfl"
    budget: Budget | None = None
    init_epochs: float | None = None
    select_every: int | None = None
    collaborate_every: int | None = None
    ggc_tie: Literal["add", "larger"] | None = None
    budget_counts_owner: bool | None = None
    peers_on: Literal["device", "host"] | None = None
    reward_samples: int | None = None
    batched_rewards: Literal["auto", "on", "off"] | None = None


@dataclass(frozen=True)
class DPFLRandom(DPFL):
    """DPFL's ablation: random collaborators under the same budget."""

    name: ClassVar[str] = "dpfl_random"


@dataclass(frozen=True)
class PFedGraph(Method):
    """A collaboration graph from model similarity (``alpha``: default 1/(0.08·N))."""

    name: ClassVar[str] = "pfedgraph"
    alpha: float | None = None
    lam: float | None = None
    regularizer: Literal["normalized", "cosine"] | None = None
    similarity: Literal["all", "head"] | None = None
    local_steps: int | None = None


@dataclass(frozen=True)
class FedCollab(Method):
    """Coalitions from estimated distances; ``base`` trains each coalition."""

    name: ClassVar[str] = "fedcollab"
    c: float | None = None
    restarts: int | None = None
    base: str | None = None
    distance_rounds: int | None = None


@dataclass(frozen=True)
class Equilibrium(Method):
    """Collaboration equilibrium: stable coalitions from estimated benefit graphs."""

    name: ClassVar[str] = "equilibrium"
    base: str | None = None
    ocs: Literal["greedy", "spo"] | None = None
    init_epochs: float | None = None
    budget: Budget | None = None


@dataclass(frozen=True)
class IPFL(Method):
    """A market for models: clients buy and sell under cost and eagerness."""

    name: ClassVar[str] = "ipfl"
    lam: float | None = None
    eta: float | None = None
    distance: Literal["cosine", "l2"] | None = None
    cost: float | None = None
    eagerness: float | None = None


TYPED_METHODS: tuple[type[Method], ...] = (
    Local,
    FedAvg,
    FedAvgFT,
    FedProx,
    FedProxFT,
    Ditto,
    DPFL,
    DPFLRandom,
    PFedGraph,
    FedCollab,
    Equilibrium,
    IPFL,
)
"""Every built-in method's typed object (a test checks them against the registry)."""
