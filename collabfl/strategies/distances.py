"""FedCollab's pairwise distribution distances, estimated federatedly (the paper's Algorithm 1).

For each pair (i, j), i < j, a client discriminator learns to tell i's samples (target 1) from
j's (target 0). It is trained like a two-client FedAvg: each estimation step the coordinator
sends both clients the pair's shared weights, each runs local SGD on its own samples with its
constant target, and the coordinator averages the two copies. Each client reports only the
accuracy of the weights it received on its own held-out samples; their mean is the balanced
accuracy, and D̂_ij = max(0, 2·BalAcc − 1).

Every pair advances in the same step: a client gets one message per step carrying the
discriminators of all its pairs, so estimating N(N−1)/2 distances costs as many messages per
client as estimating one. The pair's balanced accuracy is evaluated every ``eval_every``
steps (the official code: every 10 rounds), and a pair stops after ``patience`` steps without a
better one (or after ``rounds``). Its estimate is the balanced accuracy of its last evaluation:
picking the best of many noisy held-out evaluations would bias distances between identical
distributions upwards, so the best value only decides when to stop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from collabfl.strategies.protocol import ClientPool, FlatVector, Instruction, Reply
from collabfl.strategies.verbs import Discriminate, Features

Pair = tuple[int, int]
"""Two client ids, the smaller first (the discriminator's target-1 client)."""


@dataclass(frozen=True)
class DistanceSettings:
    """Discriminator training knobs. The official code takes 1 SGD step (batch 32, lr 0.01) per
    round for up to 2000 rounds and stops after 100 without gain; our defaults take 10 local
    steps per round for up to 200 rounds, a tenth of the messages for as many SGD steps (on
    MNIST-1D, 300 single-step rounds left disjoint-label pairs at D̂ ≈ 0.4–0.8)."""

    rounds: int = 200
    local_steps: int = 10
    lr: float = 0.01
    batch_size: int = 32
    hidden: int = 200
    patience: int = 20
    features: Features = "raw"
    """``initial_model``: inputs go through the shared initial model's layers up to its last
    linear layer, a frozen feature extractor for image data (nothing is trained or sent)."""
    eval_every: int = 1
    """Steps between evaluations. 1: every step's report counts, the fresh discriminators'
    included; k > 1: the reports after 1, k + 1, 2k + 1, ... steps of training, as the
    official code evaluates after its rounds 0, k, 2k, ... (its k = 10)."""
    scale_label: bool = False
    """Weigh the one-hot label input as the official code does
    (client.discriminator.official_label_scale); ours leaves it at 1."""

    def __post_init__(self) -> None:
        for name in ("rounds", "local_steps", "batch_size", "hidden", "patience", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.eval_every > 1 and self.rounds < 2:
            raise ValueError("eval_every > 1 needs rounds >= 2: the first evaluation is at step 1")
        if self.features not in ("raw", "initial_model"):
            raise ValueError(f"features must be 'raw' or 'initial_model', got {self.features!r}")


@dataclass(frozen=True)
class DistanceEstimate:
    """What an estimation produced and what it cost."""

    distances: dict[Pair, float]
    balanced_accuracy: dict[Pair, float]
    steps: int
    """Estimation steps run: messages each involved client received."""
    model_bytes: int
    """Discriminator bytes moved between the coordinator and the clients, both directions."""
    unresolved: list[Pair] = field(default_factory=list)
    """Pairs dropped because a client did not answer or answered something unusable."""
    failed: list[int] = field(default_factory=list)
    """The clients responsible: treat them as absent until a later estimation succeeds."""
    problems: list[str] = field(default_factory=list)

    def matrix(self, clients: Sequence[int]) -> npt.NDArray[np.float64]:
        """D̂ over ``clients`` (row/column order as given), symmetric, zero diagonal."""
        index = {k: n for n, k in enumerate(clients)}
        result = np.zeros((len(clients), len(clients)))
        for (i, j), value in self.distances.items():
            if i in index and j in index:
                result[index[i], index[j]] = result[index[j], index[i]] = value
        return result

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (for checkpoints): pairs as "i,j" keys."""
        return {
            "distances": {f"{i},{j}": v for (i, j), v in self.distances.items()},
            "balanced_accuracy": {f"{i},{j}": v for (i, j), v in self.balanced_accuracy.items()},
            "steps": self.steps,
            "model_bytes": self.model_bytes,
            "unresolved": [list(p) for p in self.unresolved],
            "failed": list(self.failed),
            "problems": list(self.problems),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DistanceEstimate:
        def pairs(values: Mapping[str, float]) -> dict[Pair, float]:
            return {_pair(*map(int, key.split(","))): float(v) for key, v in values.items()}

        return cls(
            pairs(data["distances"]),
            pairs(data["balanced_accuracy"]),
            int(data["steps"]),
            int(data["model_bytes"]),
            [_pair(*p) for p in data["unresolved"]],
            [int(k) for k in data["failed"]],
            [str(p) for p in data["problems"]],
        )

    def merged(self, other: DistanceEstimate) -> DistanceEstimate:
        """This estimate with ``other``'s pairs added (a late joiner's distances)."""
        return DistanceEstimate(
            {**self.distances, **other.distances},
            {**self.balanced_accuracy, **other.balanced_accuracy},
            self.steps + other.steps,
            self.model_bytes + other.model_bytes,
            self.unresolved + other.unresolved,
            sorted(set(self.failed) | set(other.failed)),
            self.problems + other.problems,
        )


def _pair(i: int, j: int) -> Pair:
    if i == j:
        raise ValueError(f"a pair needs two different clients, got {i} twice")
    return (i, j) if i < j else (j, i)


def all_pairs(clients: Iterable[int]) -> list[Pair]:
    """Every unordered pair of ``clients``, in sorted order."""
    return list(combinations(sorted(set(clients)), 2))


def pairs_with(newcomers: Iterable[int], clients: Iterable[int]) -> list[Pair]:
    """The pairs a late joiner adds: each newcomer with every other client, and each other."""
    new = sorted(set(newcomers))
    old = sorted(set(clients) - set(new))
    return sorted({_pair(n, k) for n in new for k in old} | set(all_pairs(new)))


def _nbytes(vector: FlatVector | None) -> int:
    return 0 if vector is None else vector.nbytes


def estimate_distances(
    pool: ClientPool, pairs: Sequence[Pair], settings: DistanceSettings, round_index: int
) -> DistanceEstimate:
    """Train every pair's discriminator in parallel through ``pool``; see the module doc.

    Each client trains on min_k(m_k) / 2 samples (the official m_train, k over the clients
    involved) and holds out the rest of its train split and its validation split. A client
    that does not answer, or answers with the wrong number of values, loses the pairs it is
    in for this estimation (listed in ``unresolved``); the other pairs go on.
    """
    pairs = sorted({_pair(i, j) for i, j in pairs})
    counts = pool.sample_counts
    involved = sorted({k for pair in pairs for k in pair})
    missing = [k for k in involved if k not in counts]
    if missing:
        raise ValueError(f"clients {missing} are not in the federation")
    if not pairs:
        return DistanceEstimate({}, {}, 0, 0)
    samples = max(1, min(counts[k] for k in involved) // 2)
    weights: dict[Pair, torch.Tensor | None] = dict.fromkeys(pairs)
    balanced: dict[Pair, float] = {}
    best = dict.fromkeys(pairs, -1.0)
    stale = dict.fromkeys(pairs, 0)
    active = list(pairs)
    unresolved: list[Pair] = []
    problems: list[str] = []
    failed_clients: set[int] = set()
    moved = steps = 0
    for step in range(settings.rounds):
        if not active:
            break
        by_client = _pairs_by_client(active)
        instructions = _instructions(by_client, weights, settings, round_index, step, samples)
        replies = pool.send(instructions)
        steps += 1
        moved += sum(_nbytes(i.model) for i in instructions.values())
        moved += sum(_nbytes(r.model) for r in replies.values())
        slices, failed = _split_replies(by_client, replies, step, problems)
        failed_clients |= failed
        evaluated = step % settings.eval_every == 1 % settings.eval_every
        for pair in list(active):
            i, j = pair
            if i in failed or j in failed:
                active.remove(pair)
                unresolved.append(pair)
                continue
            (w_i, acc_i), (w_j, acc_j) = slices[i][pair], slices[j][pair]
            if w_i.shape != w_j.shape:
                problems.append(f"pair {pair}: the clients' discriminators differ in size")
                failed_clients |= {i, j}
                active.remove(pair)
                unresolved.append(pair)
                continue
            weights[pair] = (w_i + w_j) / 2
            if not evaluated:
                continue
            balanced[pair] = (acc_i + acc_j) / 2
            if balanced[pair] > best[pair]:
                best[pair], stale[pair] = balanced[pair], 0
            else:
                stale[pair] += settings.eval_every
                if stale[pair] >= settings.patience:
                    active.remove(pair)
    resolved = {p: b for p, b in balanced.items() if p not in unresolved}
    distances = {p: max(0.0, 2 * b - 1) for p, b in resolved.items()}
    return DistanceEstimate(
        distances, resolved, steps, moved, unresolved, sorted(failed_clients), problems
    )


def _pairs_by_client(active: Sequence[Pair]) -> dict[int, list[Pair]]:
    """The active pairs each client is in (its discriminators' order in its messages)."""
    by_client: dict[int, list[Pair]] = {}
    for pair in active:
        for k in pair:
            by_client.setdefault(k, []).append(pair)
    return dict(sorted(by_client.items()))


def _instructions(
    by_client: Mapping[int, list[Pair]],
    weights: Mapping[Pair, torch.Tensor | None],
    settings: DistanceSettings,
    round_index: int,
    step: int,
    samples: int,
) -> dict[int, Instruction]:
    instructions = {}
    for k, pairs in by_client.items():
        shared = [w for p in pairs if (w := weights[p]) is not None]
        task = Discriminate(
            peers=tuple(j if i == k else i for i, j in pairs),
            targets=tuple(1 if i == k else 0 for i, _ in pairs),
            samples=samples,
            step=step,
            local_steps=settings.local_steps,
            lr=settings.lr,
            batch_size=settings.batch_size,
            hidden=settings.hidden,
            features=settings.features,
            scale_label=settings.scale_label,
        )
        model = torch.cat(shared) if len(shared) == len(pairs) else None
        instructions[k] = Instruction(round_index, task, model)
    return instructions


def _split_replies(
    by_client: Mapping[int, list[Pair]],
    replies: Mapping[int, Reply],
    step: int,
    problems: list[str],
) -> tuple[dict[int, dict[Pair, tuple[torch.Tensor, float]]], set[int]]:
    """Each client's (discriminator, held-out accuracy) per pair; clients with no usable reply."""
    slices: dict[int, dict[Pair, tuple[torch.Tensor, float]]] = {}
    failed: set[int] = set()
    for k, pairs in by_client.items():
        reply = replies.get(k)
        if reply is None:
            failed.add(k)
            problems.append(f"client {k} did not answer step {step}")
            continue
        try:
            slices[k] = _reply_slices(reply, pairs)
        except ValueError as error:
            failed.add(k)
            problems.append(f"client {k}: {error}")
    return slices, failed


def _reply_slices(reply: Reply, pairs: Sequence[Pair]) -> dict[Pair, tuple[torch.Tensor, float]]:
    accuracy = list(reply.metrics.disc_acc or ())
    if len(accuracy) != len(pairs) or not all(0.0 <= a <= 1.0 for a in accuracy):
        raise ValueError(f"expected {len(pairs)} accuracies in [0, 1], got {accuracy}")
    if reply.model is None:
        raise ValueError("no discriminators in the reply")
    vector = reply.model
    if vector.numel() % len(pairs) or not torch.isfinite(vector).all():
        raise ValueError(f"{vector.numel()} values are not {len(pairs)} finite discriminators")
    rows = vector.view(len(pairs), -1)
    return {pair: (rows[n].clone(), accuracy[n]) for n, pair in enumerate(pairs)}
