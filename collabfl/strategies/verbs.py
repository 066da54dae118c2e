"""What the coordinator may ask a client to do: one frozen dataclass per verb.

Every field is typed and defaulted as the client's handlers assume, so a method builds a task
with the names it means and a wrong value fails where the task is made, not deep inside a
client's training. The same dataclasses travel on the wire (strategies.wire): their fields
are the message's keys, and ``None`` means "not set" (the key is left out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Literal, get_args

from collabfl.strategies.greedy import TieRule
from collabfl.strategies.pfedgraph import Attack

AlignMode = Literal["normalized", "cosine"]
"""How TRAIN's alignment term reads its target: as given, or scaled to unit norm."""
Search = Literal["greedy", "random", "none"]
PeersOn = Literal["device", "host"]
BatchedRewards = Literal["auto", "on", "off"]
"""Whether GGC reads look-ahead rewards six models at a time (strategies/greedy.py's
``LookAhead``): ``auto`` on a CUDA device only, where it pays (benchmarks/ggc_batching.py)."""
"""Where a client keeps the peer models it holds and the search's running sums: on its
compute device, or in host memory (only the average being evaluated goes to the device)."""
"""COLLABORATE's choice of collaborators: GGC/BGGC, a uniform draw, or the given list."""
Features = Literal["raw", "initial_model"]
"""DISCRIMINATE's inputs: the raw samples, or the shared initial model's penultimate layer."""
Split = Literal["train", "val"]
"""The data split a GRADIENT query is answered on."""


class Verb(StrEnum):
    """What a client is asked to do. Each verb is one message in a real federation."""

    TRAIN = "train"
    COLLABORATE = "collaborate"
    EVALUATE = "evaluate"
    DISCRIMINATE = "discriminate"
    GRADIENT = "gradient"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _finite_at_least_zero(name: str, value: float) -> None:
    _require(math.isfinite(value) and value >= 0, f"{name} must be finite and >= 0, got {value}")


def _one_of(name: str, value: str, allowed: object) -> None:
    options = get_args(allowed)
    _require(value in options, f"unknown {name} {value!r}; expected one of {options}")


@dataclass(frozen=True)
class Train:
    """Optionally load the attached model into ``model_into`` (default: ``slot``), run
    ``epochs`` of local SGD on ``slot``, then optionally publish the result to the peer store
    and/or upload it in the reply.

    ``from_best``: start from the best-validation model kept for that slot (FedAvg+FT).
    ``steps`` > 0: exactly that many SGD steps instead of ``epochs`` (pFedGraph's code).
    ``score_local``: after training, also evaluate the trained model as the "local"
    candidate of ``slot``'s best-validation record, so a client whose collaborators hurt it
    can end with its own model (what DPFL's and pFedGraph's official code report).
    ``prox_mu``: proximal weight towards ``prox_slot`` (default: the starting model).
    ``align_lam``: pFedGraph's alignment weight towards ``align_slot``. ``attack``: poison the
    upload (simulated model-poisoning client).
    """

    verb: ClassVar[Verb] = Verb.TRAIN

    epochs: float
    slot: str = "model"
    model_into: str | None = None
    from_best: str | None = None
    prox_mu: float = 0.0
    prox_slot: str | None = None
    align_lam: float = 0.0
    align_slot: str | None = None
    align_mode: AlignMode = "normalized"
    publish: bool = False
    upload: bool = False
    attack: Attack | None = None
    score_local: bool = False
    steps: int = 0

    def __post_init__(self) -> None:
        _finite_at_least_zero("epochs", self.epochs)
        _require(self.steps >= 0, f"steps must be >= 0, got {self.steps}")
        _finite_at_least_zero("prox_mu", self.prox_mu)
        _finite_at_least_zero("align_lam", self.align_lam)
        _require(
            self.align_lam == 0 or self.align_slot is not None,
            "align_lam > 0 needs an align_slot to align with",
        )
        _one_of("align_mode", self.align_mode, AlignMode)
        if self.attack is not None:
            _one_of("attack", self.attack, Attack)


@dataclass(frozen=True)
class Collaborate:
    """Fetch candidate peers' published models, pick collaborators (``search``) and replace
    ``slot`` with the weighted average of itself and the chosen peers (unless ``assign`` is
    False: the equilibrium's OCS search only wants the choice).

    ``weights`` are the candidates' aggregation weights, in ``candidates`` order; ``budget``
    caps the peer models held at once and the collaborators chosen (None: unlimited).
    ``step`` tells repeated searches within a round apart; ``tie``: the greedy search's rule
    when neither gain is positive (strategies.greedy.TieRule). A real federation attaches one
    peer address and one fetch grant per candidate, and ``peer_wait_s``: how long a fetch
    may wait for a peer to publish this round's model and send it (apps/pool.py); a peer
    that has not by then is skipped for the round. ``peers_on``: where the peer models and
    the search's sums are held (``PeersOn``); ``reward_samples``: GGC's rewards on that many
    validation samples, drawn once per client (None: all of them); ``batched_rewards``:
    whether the client reads them six at a time (``BatchedRewards``).
    """

    verb: ClassVar[Verb] = Verb.COLLABORATE

    search: Search
    candidates: tuple[int, ...]
    weights: tuple[float, ...]
    budget: int | None = None
    slot: str = "model"
    assign: bool = True
    step: int | None = None
    tie: TieRule = "add"
    peer_addresses: tuple[str, ...] = ()
    peer_grants: tuple[bytes, ...] = ()
    peer_wait_s: float | None = None
    peers_on: PeersOn = "device"
    reward_samples: int | None = None
    batched_rewards: BatchedRewards = "auto"

    def __post_init__(self) -> None:
        _one_of("search", self.search, Search)
        _one_of("tie", self.tie, TieRule)
        _one_of("peers_on", self.peers_on, PeersOn)
        _one_of("batched_rewards", self.batched_rewards, BatchedRewards)
        _require(
            self.reward_samples is None or self.reward_samples >= 1,
            f"reward_samples must be >= 1 or None (all), got {self.reward_samples}",
        )
        count = len(self.candidates)
        _require(len(set(self.candidates)) == count, f"candidates repeat: {self.candidates}")
        _require(len(self.weights) == count, f"{len(self.weights)} weights for {count} candidates")
        _require(
            all(math.isfinite(w) and w >= 0 for w in self.weights),
            f"weights must be finite and >= 0, got {self.weights}",
        )
        _require(
            self.budget is None or self.budget >= 0,
            f"budget must be >= 0 or None (unlimited), got {self.budget}",
        )
        _require(
            self.peer_wait_s is None or (math.isfinite(self.peer_wait_s) and self.peer_wait_s > 0),
            f"peer_wait_s must be finite and > 0, got {self.peer_wait_s}",
        )
        for name, values in (("peer_addresses", self.peer_addresses), ("grants", self.peer_grants)):
            _require(len(values) in (0, count), f"{len(values)} {name} for {count} candidates")

    @classmethod
    def weighted_by_samples(
        cls,
        search: Search,
        candidates: Sequence[int],
        sample_counts: Mapping[int, int],
        budget: int | None,
        *,
        slot: str = "model",
        assign: bool = True,
        step: int | None = None,
        tie: TieRule = "add",
        peers_on: PeersOn = "device",
        reward_samples: int | None = None,
        batched_rewards: BatchedRewards = "auto",
    ) -> Collaborate:
        """The search over ``candidates`` with each weighted by its sample count (DPFL's and
        the equilibrium's averages)."""
        return cls(
            search,
            tuple(candidates),
            tuple(float(sample_counts[j]) for j in candidates),
            budget,
            slot=slot,
            assign=assign,
            step=step,
            tie=tie,
            peers_on=peers_on,
            reward_samples=reward_samples,
            batched_rewards=batched_rewards,
        )


@dataclass(frozen=True)
class Evaluate:
    """Optionally load the attached model into ``slot``; report validation and test metrics
    and the test accuracy of the best-validation model seen so far for that slot
    (``keep_best``: also keep that model, for a later TRAIN ``from_best``)."""

    verb: ClassVar[Verb] = Verb.EVALUATE

    slot: str = "model"
    keep_best: bool = False


@dataclass(frozen=True)
class Discriminate:
    """FedCollab's distance estimation: run ``local_steps`` SGD steps on the attached client
    discriminators (one per peer, in ``peers`` order; fresh ones when no model is attached)
    and report their accuracy on the client's held-out samples before the steps.

    ``targets``: the label this client's samples carry for each pair (1 for the pair's first
    client, 0 for the second); ``samples``: training samples per discriminator; ``step``:
    the estimation step (seeds the mini-batches); ``scale_label``: weigh the one-hot label
    input as the official code does (client.discriminator.official_label_scale).
    """

    verb: ClassVar[Verb] = Verb.DISCRIMINATE

    peers: tuple[int, ...]
    targets: tuple[int, ...]
    samples: int
    step: int
    local_steps: int
    lr: float
    batch_size: int
    hidden: int
    features: Features = "raw"
    scale_label: bool = False

    def __post_init__(self) -> None:
        _require(
            len(self.targets) == len(self.peers),
            f"{len(self.targets)} targets for {len(self.peers)} peers",
        )
        _require(set(self.targets) <= {0, 1}, f"targets must be 0 or 1, got {self.targets}")
        for name in ("samples", "batch_size", "hidden"):
            value = getattr(self, name)
            _require(value >= 1, f"{name} must be >= 1, got {value}")
        _require(self.local_steps >= 0, f"local_steps must be >= 0, got {self.local_steps}")
        _require(math.isfinite(self.lr) and self.lr > 0, f"lr must be > 0, got {self.lr}")
        _one_of("discriminator features", self.features, Features)


@dataclass(frozen=True)
class Gradient:
    """The equilibrium's SPO search: the mean loss of the attached model on the client's
    ``split`` ("train": a mini-batch of ``batch_size`` seeded by ``step``, or all of it when 0;
    "val": all of it) and its gradient with respect to the flat weights, sent back as the
    reply's model. No state changes."""

    verb: ClassVar[Verb] = Verb.GRADIENT

    split: Split
    batch_size: int = 0
    step: int = 0

    def __post_init__(self) -> None:
        _require(
            self.split in get_args(Split),
            f"gradient split must be 'train' or 'val', got {self.split!r}",
        )
        _require(self.batch_size >= 0, f"batch_size must be >= 0, got {self.batch_size}")


Task = Train | Collaborate | Evaluate | Discriminate | Gradient
"""Any instruction's task."""

TASK_TYPES: Mapping[Verb, type[Task]] = {
    Verb.TRAIN: Train,
    Verb.COLLABORATE: Collaborate,
    Verb.EVALUATE: Evaluate,
    Verb.DISCRIMINATE: Discriminate,
    Verb.GRADIENT: Gradient,
}
"""The task dataclass of each verb (what a message of that verb decodes into)."""
