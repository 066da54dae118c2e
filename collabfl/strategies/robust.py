"""Robust replacements for FedAvg's weighted mean, for methods the coordinator aggregates.

The mean lets one upload move the average without bound: a client that scales its model to
just under the coordinator's magnitude limit (apps/reply_checks.py) drags the global model
to its scale. The coordinate-wise median and the trimmed mean bound what a minority of
uploads can do; both ignore sample counts, so a false count gains nothing there either.
Norm clipping bounds each update (upload minus the model the round sent) before any rule.

pFedGraph aggregates per client with the weights of its graph row rather than by sample
count: ``graph_aggregates`` gives each row the weighted coordinate-wise median (the value at
which half the row's weight lies on either side) or the weighted trimmed mean (``trim`` of
the row's weight cut at each end of every coordinate). An upload whose weight in a row is
below one half cannot move that row's median beyond the honest values; one whose weight is
at most ``trim`` is cut from its trimmed mean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import torch

from collabfl.strategies.protocol import FlatVector, Reply
from collabfl.strategies.rounds import weighted_average

Rule = Literal["mean", "median", "trimmed_mean"]
Matrix = npt.NDArray[np.float64]


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


def clipped_update(model: FlatVector, centre: FlatVector, bound: float) -> FlatVector:
    """``model`` with its update from ``centre`` (moved to its device) at most ``bound`` (L2)."""
    return _clipped(model, centre.to(model.device), bound)


def graph_aggregates(weights: Matrix, models: Matrix, rule: Rule, trim: float) -> Matrix:
    """Row i: the ``rule`` of the rows of ``models`` (N×D) weighted by row i of ``weights``
    (M×N, each row >= 0 with a positive sum): ``mean`` is W @ models; ``median`` and
    ``trimmed_mean`` work coordinate by coordinate on the weight mass."""
    if rule == "mean":
        aggregates: Matrix = weights @ models
        return aggregates
    order = np.argsort(models, axis=0, kind="stable")
    ordered = np.take_along_axis(models, order, axis=0)
    rows = np.empty((weights.shape[0], models.shape[1]))
    for i, row in enumerate(weights):
        mass = (row / row.sum())[order]
        upper = np.cumsum(mass, axis=0)
        if rule == "median":
            first = np.argmax(upper >= 0.5 - 1e-12, axis=0)
            rows[i] = np.take_along_axis(ordered, first[None, :], axis=0)[0]
            continue
        kept = np.clip(np.minimum(upper, 1.0 - trim) - np.maximum(upper - mass, trim), 0.0, None)
        rows[i] = (kept * ordered).sum(axis=0) / kept.sum(axis=0)
    return rows
