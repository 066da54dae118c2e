"""Robust replacements for FedAvg's weighted mean, for methods the coordinator aggregates.

The mean lets one upload move the average without bound: a client that scales its model to
just under the coordinator's magnitude limit (flower/reply_checks.py) drags the global model
to its scale. The coordinate-wise median and the trimmed mean bound what a minority of
uploads can do; both ignore sample counts, so a false count gains nothing there either.
Norm clipping bounds each update (upload minus the model the round sent) before any rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from collabfl.strategies.protocol import FlatVector, Reply
from collabfl.strategies.rounds import weighted_average

Rule = Literal["mean", "median", "trimmed_mean"]


@dataclass(frozen=True)
class Aggregation:
    """How uploads become one model: ``rule`` (``mean``: FedAvg's sample-weighted mean),
    ``trim`` (the share of uploads dropped at each end of every coordinate by the trimmed
    mean, at least one each side once there are three) and ``clip_norm`` (the largest L2
    norm an update keeps; None: no clipping)."""

    rule: Rule = "mean"
    trim: float = 0.2
    clip_norm: float | None = None

    def combine(
        self,
        replies: Mapping[int, Reply],
        sample_counts: Mapping[int, int],
        sent: FlatVector | None,
    ) -> FlatVector:
        """The aggregate of the uploaded models; ``sent``: the model the round started
        from (updates are clipped around it; None: around the coordinate-wise median)."""
        uploaded = {k: model for k in sorted(replies) if (model := replies[k].model) is not None}
        if not uploaded:
            raise RuntimeError("no client uploaded a model this round; the federation is empty")
        models = list(uploaded.values())
        if self.clip_norm is not None:
            centre = sent if sent is not None else torch.stack(models).median(dim=0).values
            models = [_clipped(model, centre, self.clip_norm) for model in models]
        if self.rule == "mean":
            return weighted_average(models, [sample_counts[k] for k in uploaded])
        stacked = torch.stack(models)
        if self.rule == "median":
            return stacked.median(dim=0).values
        cut = max(1, math.floor(self.trim * len(models))) if len(models) >= 3 else 0
        ordered = stacked.sort(dim=0).values
        return ordered[cut : len(models) - cut].mean(dim=0)


def _clipped(model: FlatVector, centre: FlatVector, bound: float) -> FlatVector:
    """``model`` with its distance from ``centre`` at most ``bound`` (L2)."""
    update = model - centre
    norm = float(update.norm())
    return model if norm <= bound else centre + update * (bound / norm)
