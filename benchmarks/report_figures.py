"""The reproduction report's figures (benchmarks/reproduce.py), one PNG per function.

Each function takes what the report stores (its cells, or finished units' records) and writes
one figure; it returns None when the units hold nothing to draw, so the report can say which
figure is missing and why instead of drawing an empty one. Figures use matplotlib's Agg canvas
directly, like engine/report/plots.py, so nothing needs a screen.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from collabfl.engine.report.plots import (
    OVER_WIDTH,
    client_ticks,
    clipped_error,
    mark_fine_tuning,
    mark_true_groups,
    method_style,
    same_curve,
    true_group_order,
)

DPI = 110


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path


def accuracy_vs_variance(
    title: str, cells: Mapping[str, Mapping[str, Any]], path: Path
) -> Path | None:
    """Write ``accuracy_vs_variance_figure`` as a PNG (None: nothing to draw)."""
    fig = accuracy_vs_variance_figure(title, cells)
    return None if fig is None else _save(fig, path)


def accuracy_vs_variance_figure(
    title: str, cells: Mapping[str, Mapping[str, Any]]
) -> Figure | None:
    """Per method, mean accuracy against variance across clients (means over seeds, ± sample
    std over seeds, clipped to 0-100 % and to variance >= 0); each method's colour and marker
    is its place in ``cells``, as in the setting's other figures."""
    if not any(c.get("acc") and c.get("var") for c in cells.values()):
        return None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for n, (method, c) in enumerate(cells.items()):
        acc, var = c.get("acc"), c.get("var")
        if not acc or not var:
            continue
        x, y = statistics.fmean(var), statistics.fmean(acc)
        colour, marker = method_style(n, len(cells))
        ax.errorbar(
            x,
            y,
            xerr=clipped_error(x, statistics.stdev(var), high=math.inf) if len(var) > 1 else None,
            yerr=clipped_error(y, statistics.stdev(acc)) if len(acc) > 1 else None,
            fmt=marker or "o",
            color=colour,
            capsize=3,
            label=method,
        )
    ax.set_xlabel("variance of client accuracy (%²), lower is fairer")
    ax.set_ylabel("mean client accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def series_by_round(
    title: str,
    ylabel: str,
    curves: Mapping[str, Sequence[Sequence[float | None]]],
    path: Path,
    planned: int | None = None,
) -> Path | None:
    """Write ``series_by_round_figure`` as a PNG (None: nothing to draw)."""
    fig = series_by_round_figure(title, ylabel, curves, planned)
    return None if fig is None else _save(fig, path)


def series_by_round_figure(
    title: str,
    ylabel: str,
    curves: Mapping[str, Sequence[Sequence[float | None]]],
    planned: int | None = None,
) -> Figure | None:
    """Per method, the mean over its runs (seeds) of a per-round series, solid lines only
    (a dash means the best-validation model in accuracy_by_round.png, and these are each
    round's model). Colour and marker follow the method's place in ``curves``. Rounds from
    ``planned`` on (fedavg_ft's fine-tuning after the last round) are a labelled star, not a
    jump of the line. A method whose curve is another's (FedCollab that forms one coalition
    is FedAvg) is drawn thinner on top of it and its legend says whose, so both stay visible."""
    if not any(curves.values()):
        return None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    drawn: dict[str, np.ndarray] = {}
    for i, (method, runs) in enumerate(curves.items()):
        if not runs:
            continue
        length = min(len(r) for r in runs)
        values = np.array([[np.nan if v is None else v for v in r[:length]] for r in runs])
        colour, marker = method_style(i, len(curves))
        mean = np.nanmean(values, axis=0)
        rounds = np.arange(length)
        kept = rounds < planned if planned else np.ones(length, dtype=bool)
        same = same_curve(drawn, mean[kept])
        drawn[method] = mean[kept]
        ax.plot(
            rounds[kept],
            mean[kept],
            color=colour,
            marker=marker,
            markersize=3 if same else 4,
            linewidth=OVER_WIDTH if same else 1.5,
            label=f"{method} (n={len(runs)}" + (f", same curve as {same})" if same else ")"),
        )
        if not kept.all():
            mark_fine_tuning(ax, rounds[~kept], mean[~kept], colour, method, markersize=10)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def graph_heatmap(
    title: str, matrix: Sequence[Sequence[float]], groups: Sequence[str] | None, path: Path
) -> Path | None:
    """Write ``graph_heatmap_figure`` as a PNG (None: nothing to draw)."""
    fig = graph_heatmap_figure(title, matrix, groups)
    return None if fig is None else _save(fig, path)


def graph_heatmap_figure(
    title: str, matrix: Sequence[Sequence[float]], groups: Sequence[str] | None
) -> Figure | None:
    """A collaboration graph's weights (row i: the weight client i puts on peer j). With
    ``groups`` (each client's true group: a grouped partition's blocks, label-flipped
    attackers) clients are ordered by group and a coloured strip and a legend mark them."""
    graph = np.array(matrix, dtype=float)
    if graph.size == 0:
        return None
    if groups is not None and len(groups) != len(graph):
        groups = None  # a record that does not match its graph: say nothing rather than lie
    order = true_group_order(groups) if groups else list(range(len(graph)))
    graph = graph[np.ix_(order, order)]
    np.fill_diagonal(graph, np.nan)
    fig = Figure(figsize=(5.5, 5))
    ax = fig.add_subplot()
    image = ax.imshow(graph, cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=ax, shrink=0.8, label="aggregation weight")
    by_group = ", by true group" if groups else ""
    if groups:
        handles = mark_true_groups(ax, [groups[k] for k in order])
        client_ticks(ax, order)
        ax.legend(
            handles=handles,
            title="true group",
            loc="upper center",
            bbox_to_anchor=(0.5, -0.12),
            ncols=min(len(handles), 4),
            fontsize=8,
        )
    ax.set_xlabel(f"peer{by_group}")
    ax.set_ylabel(f"client{by_group}")
    ax.set_title(title, fontsize=10)
    return fig


def coalition_structure(
    title: str,
    rows: Mapping[str, Sequence[Sequence[int]]],
    clients: int,
    path: Path,
    groups: Sequence[str] | None = None,
) -> Path | None:
    """Write ``coalition_structure_figure`` as a PNG (None: nothing to draw)."""
    fig = coalition_structure_figure(title, rows, clients, groups)
    return None if fig is None else _save(fig, path)


def coalition_structure_figure(
    title: str,
    rows: Mapping[str, Sequence[Sequence[int]]],
    clients: int,
    groups: Sequence[str] | None = None,
) -> Figure | None:
    """One strip per (method, seed): each client coloured by the coalition it ended in
    (coalitions numbered by their smallest member, so equal partitions look alike). With
    ``groups`` (each client's true group) clients are ordered by group, and a top strip,
    lines between groups and a legend mark the groups a method should find."""
    if not rows:
        return None
    if groups is not None and len(groups) != clients:
        groups = None
    order = true_group_order(groups) if groups else list(range(clients))
    position = {k: p for p, k in enumerate(order)}
    grid = np.full((len(rows), clients), np.nan)
    for n, coalitions in enumerate(rows.values()):
        for index, members in enumerate(sorted(coalitions, key=min)):
            for k in members:
                if 0 <= k < clients:
                    grid[n, position[k]] = index
    fig = Figure(figsize=(7, 0.35 * len(rows) + 1.2 + (0.35 if groups else 0)))
    ax = fig.add_subplot()
    ax.imshow(grid, cmap="tab20", aspect="auto", interpolation="nearest", vmin=0, vmax=19)
    labels = list(rows)
    ax.set_xticks(range(clients), [str(k) for k in order], fontsize=6)
    if groups:
        handles = mark_true_groups(ax, [groups[k] for k in order], rows=False)
        ax.set_yticks([-1.1, *range(len(rows))], ["true group", *labels], fontsize=7)
        ax.legend(
            handles=handles, title="true group", fontsize=7, loc="upper left",
            bbox_to_anchor=(1.01, 1),
        )  # fmt: skip
        ax.set_xlabel("client, by true group (colour: its coalition)")
    else:
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.set_xlabel("client (colour: its coalition)")
    ax.set_title(title, fontsize=10)
    return fig
