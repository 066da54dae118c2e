"""Simulated model-poisoning clients, for robustness experiments with any uploading method.

The coordinator-side round protocols only tag an attacker's TRAIN task with the attack; the
client corrupts what it uploads (strategies/pfedgraph.py has the four attacks) and its
metrics are reported as malicious, so that summaries cover benign clients.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace

import numpy as np

from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.pfedgraph import Attack
from collabfl.strategies.verbs import Train


@dataclass(frozen=True)
class Attackers:
    """Who poisons their uploads (``clients``) and how (``kind``); empty means nobody."""

    kind: Attack | None = None
    clients: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def chosen(cls, kind: Attack | None, fraction: float, num_clients: int, seed: int) -> Attackers:
        """A seeded choice of round(fraction·N) attackers (none without a kind)."""
        if kind is None or fraction <= 0:
            return cls()
        count = round(fraction * num_clients)
        rng = np.random.default_rng([seed, 0x5EED])
        picked = rng.choice(num_clients, size=count, replace=False)
        return cls(kind, frozenset(int(k) for k in picked))

    def train(self, client: int, task: Train) -> Train:
        """``task`` for ``client``, with the attack added if it is an attacker."""
        if self.kind is None or client not in self.clients:
            return task
        return replace(task, attack=self.kind)

    def mark(self, metrics: MutableMapping[int, ClientMetrics]) -> None:
        """Flag the attackers' round metrics as malicious (in place)."""
        for client in self.clients & set(metrics):
            metrics[client] = replace(metrics[client], malicious=True)
