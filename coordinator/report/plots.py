"""Plots of a run or of several methods' runs; each function writes one PNG.

Figures are built on matplotlib's Agg canvas directly rather than through pyplot, so
plotting needs no screen and leaves no global figure state behind in long processes.
"""

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from collabfl.coordinator.report.graph_stats import sparsity, symmetry
from collabfl.coordinator.report.run_dir import RunRecords
from collabfl.coordinator.report.summary import malicious_clients

_DPI = 120


def _save(fig: Figure, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=_DPI, bbox_inches="tight")
    return path


def _benign_mean_by_round(records: RunRecords, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Rounds and the mean of `key` over benign clients with a value (NaN where none has one)."""
    malicious = malicious_clients(records.rows)
    by_round: dict[int, list[float]] = {}
    for row in records.rows:
        values = by_round.setdefault(int(row["round"]), [])
        if int(row["client"]) not in malicious and row.get(key) is not None:
            values.append(float(row[key]))
    rounds = np.array(sorted(by_round))
    means = np.array([np.mean(by_round[r]) if by_round[r] else np.nan for r in rounds])
    return rounds, means


def plot_accuracy_by_round(runs: dict[str, RunRecords], path: Path | str) -> Path:
    """Mean benign test accuracy per round for each method: current model solid, best-val dashed.

    The two curves differ when training overfits or a graph method destabilises late; the
    dashed one is what results report.
    """
    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    for index, (method, records) in enumerate(runs.items()):
        colour = f"C{index % 10}"
        rounds, current = _benign_mean_by_round(records, "test_acc")
        ax.plot(rounds, current * 100, color=colour, label=method)
        rounds, best = _benign_mean_by_round(records, "best_test_acc")
        ax.plot(rounds, best * 100, color=colour, linestyle="--")
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("mean test accuracy of benign clients (%)")
    ax.grid(alpha=0.3)
    methods_legend = ax.legend(loc="lower right", title="method")
    ax.add_artist(methods_legend)
    ax.legend(
        handles=[
            Line2D([], [], color="grey", label="current model"),
            Line2D([], [], color="grey", linestyle="--", label="best-validation model"),
        ],
        loc="lower center",
    )
    return _save(fig, path)


def plot_accuracy_vs_variance(summaries: list[dict[str, Any]], path: Path | str) -> Path:
    """Mean vs variance of per-client test accuracy, one labelled point per method.

    Up and to the left is better: accurate on average and fair across clients. Methods
    without accuracy numbers are left out.
    """
    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    for index, summary in enumerate(summaries):
        mean, var = summary.get("mean_test_acc"), summary.get("var_test_acc")
        if mean is None or var is None:
            continue
        x, y = var * 100**2, mean * 100
        ax.scatter([x], [y], color=f"C{index % 10}")
        ax.annotate(summary["method"], (x, y), textcoords="offset points", xytext=(5, 5))
    ax.margins(0.15)
    ax.set_xlabel("variance of client test accuracy (%²)")
    ax.set_ylabel("mean client test accuracy (%)")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_adjacency_heatmaps(records: RunRecords, path: Path | str) -> Path | None:
    """The collaboration graph at the first, middle and last rounds that have one.

    Panels share one colour scale so weights compare across rounds. Returns None, writing
    nothing, for a method without graphs.
    """
    if not records.graphs:
        return None
    available = sorted(records.graphs)
    chosen = list(dict.fromkeys([available[0], available[len(available) // 2], available[-1]]))
    vmax = max(float(records.graphs[r].max()) for r in chosen) or 1.0

    fig = Figure(figsize=(4.2 * len(chosen) + 1, 4.4), layout="constrained")
    axes = fig.subplots(1, len(chosen), squeeze=False)[0]
    for ax, round_index in zip(axes, chosen, strict=True):
        matrix = records.graphs[round_index]
        image = ax.imshow(matrix, vmin=0.0, vmax=vmax, cmap="viridis", interpolation="nearest")
        ax.set_title(
            f"round {round_index}\nsparsity {sparsity(matrix):.0%}, symmetry {symmetry(matrix):.0%}"
        )
        ax.set_xlabel("peer j (model used)")
        ax.set_ylabel("client i")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, ax=list(axes), label="weight client i puts on peer j")
    return _save(fig, path)
