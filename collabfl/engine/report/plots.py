"""Plots of a run or of several methods' runs; each function writes one PNG.

Figures are built on matplotlib's Agg canvas directly rather than through pyplot, so
plotting needs no screen and leaves no global figure state behind in long processes.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from collabfl.engine.report.graph_stats import sparsity, symmetry
from collabfl.engine.report.run_dir import RunRecords
from collabfl.engine.report.setting import setting_title
from collabfl.engine.report.summary import malicious_clients

_DPI = 120


def _save(fig: Figure, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=_DPI, bbox_inches="tight")
    return path


RunsByMethod = Mapping[str, RunRecords | Sequence[RunRecords]]
"""Per method label: its run, or its runs over several seeds."""

SETUP_ROUND_METHODS = ("dpfl", "dpfl_random")
"""Methods whose round 0 is an initialisation (BGGC over all clients) rather than a round."""


def _seed_runs(runs: RunsByMethod) -> dict[str, list[RunRecords]]:
    return {m: [r] if isinstance(r, RunRecords) else list(r) for m, r in runs.items()}


def _benign_by_round(records: RunRecords, key: str) -> dict[int, list[float]]:
    """Per round, the values of ``key`` of benign clients that have one."""
    malicious = malicious_clients(records.rows)
    by_round: dict[int, list[float]] = {}
    for row in records.rows:
        values = by_round.setdefault(int(row["round"]), [])
        if int(row["client"]) not in malicious and row.get(key) is not None:
            values.append(float(row[key]))
    return by_round


def _curve(seeds: list[RunRecords], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rounds, mean and spread of ``key`` in %: for one run its benign clients' mean and std
    across them; for several seeds the mean of their client means and its std across seeds
    (NaN where nothing is known)."""
    per_seed = [_benign_by_round(records, key) for records in seeds]
    rounds = np.array(sorted(set().union(*per_seed)), dtype=int)
    if len(per_seed) == 1:
        values = [per_seed[0][r] for r in rounds]
    else:
        values = [[float(np.mean(s[r])) for s in per_seed if s.get(r)] for r in rounds]
    mean = np.array([np.mean(v) if v else np.nan for v in values]) * 100
    spread = np.array([np.std(v, ddof=int(len(seeds) > 1)) if len(v) > 1 else 0.0 for v in values])
    return rounds, mean, spread * 100


def plot_accuracy_by_round(runs: RunsByMethod, path: Path | str) -> Path:
    """Write ``accuracy_by_round_figure`` as a PNG."""
    return _save(accuracy_by_round_figure(runs), path)


def accuracy_by_round_figure(runs: RunsByMethod) -> Figure:
    """Mean benign test accuracy per round for each method: current model solid, best-val dashed
    with a band of ± one std (across clients for one seed, across seeds for several; clipped
    to 0-100 %), and the DPFL set-up round marked. A step after the planned rounds (fedavg_ft's
    fine-tuning) is a labelled star, not a jump of the curves; past ten methods each also gets
    a marker; rounds in which a run missed clients are shaded; the legends sit right of the
    axes, off the curves.

    The two curves differ when training overfits or a graph method destabilises late; the
    dashed one is what results report.
    """
    by_method = _seed_runs(runs)
    seeds = max((len(r) for r in by_method.values()), default=0)
    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    drawn: dict[str, np.ndarray] = {}
    for index, (method, records) in enumerate(by_method.items()):
        if not records:
            continue
        colour, marker = method_style(index, len(by_method))
        planned = int(records[0].config.get("rounds") or 0)
        rounds, current, _ = _curve(records, "test_acc")
        _, best, spread = _curve(records, "best_test_acc")
        kept = rounds < planned if planned else np.ones(len(rounds), dtype=bool)
        same = same_curve(drawn, np.concatenate([current[kept], best[kept]]))
        drawn[method] = np.concatenate([current[kept], best[kept]])
        label = f"{method} (same curve as {same})" if same else method
        width = OVER_WIDTH if same else None  # None: matplotlib's default width
        ax.plot(
            rounds[kept], current[kept], color=colour, marker=marker, linewidth=width, label=label
        )
        ax.plot(
            rounds[kept], best[kept], color=colour, marker=marker, linewidth=width,
            linestyle="--", label="_best",
        )  # fmt: skip
        low, high = np.clip(best - spread, 0, 100), np.clip(best + spread, 0, 100)
        ax.fill_between(rounds[kept], low[kept], high[kept], color=colour, alpha=0.15)
        if not kept.all():  # a step after the planned rounds: fedavg_ft's fine-tuning
            mark_fine_tuning(ax, rounds[~kept], best[~kept], colour, method, markersize=12)
    for count, missing in enumerate(_rounds_missing_clients(by_method)):
        label = "rounds missing clients" if count == 0 else "_missing"
        ax.axvspan(missing - 0.5, missing + 0.5, color="grey", alpha=0.12, label=label)
    setup = [m for m in by_method if m.split(":")[0] in SETUP_ROUND_METHODS]
    if setup:
        ax.axvline(0, color="black", linestyle=":", label="DPFL set-up (BGGC)")
    configs = [r[0].config for r in by_method.values() if r]
    only = next(iter(by_method)) if len(by_method) == 1 else None
    across = f"{seeds} seeds" if seeds > 1 else "clients"
    ax.set_title(
        f"{setting_title(configs[0] if configs else {}, only)}\n"
        f"best-validation band: ± std across {across}"
    )
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    attacked = any(
        malicious_clients(r.rows) for seeds_runs in by_method.values() for r in seeds_runs
    )
    ax.set_ylabel(f"mean test accuracy of {'benign ' if attacked else ''}clients (%)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), title="method")
    fig.legend(  # the figure's, so that a tight save keeps both legends whole
        handles=[
            Line2D([], [], color="grey", label="current model"),
            Line2D([], [], color="grey", linestyle="--", label="best-validation model"),
        ],
        loc="lower left",
        bbox_to_anchor=(1.02, 0),
        bbox_transform=ax.transAxes,
    )
    return fig


def _rounds_missing_clients(by_method: Mapping[str, list[RunRecords]]) -> list[int]:
    """Rounds in which some run heard from fewer clients than its federation has: its
    curves there average fewer clients."""
    missing: set[int] = set()
    for records in (r for seeds in by_method.values() for r in seeds):
        expected = int((records.config.get("data") or {}).get("num_clients") or 0)
        clients: dict[int, set[int]] = {}
        for row in records.rows:
            clients.setdefault(int(row["round"]), set()).add(int(row["client"]))
        last = max(clients, default=-1)
        missing |= {t for t in range(last + 1) if len(clients.get(t, ())) < expected}
    return sorted(missing)


OVER_WIDTH = 0.8
"""Line width of a curve that is exactly an earlier method's, drawn over it: thinner, so the
one beneath still shows on both sides."""


def same_curve(drawn: Mapping[str, np.ndarray], curve: np.ndarray) -> str | None:
    """The first method in ``drawn`` whose curve is ``curve`` to the bit (fedavg_ft is FedAvg
    until it fine-tunes; FedCollab with one coalition is FedAvg), or None. A line drawn over
    an identical one hides it: the caller draws it thinner and names whose curve it is."""
    return next(
        (
            method
            for method, other in drawn.items()
            if other.shape == curve.shape and np.array_equal(other, curve, equal_nan=True)
        ),
        None,
    )


TAB20 = tuple(to_hex(c) for c in colormaps["tab20"].colors)  # type: ignore[attr-defined]
"""Pairs of a colour and its lighter shade; the darker ones are the default ten."""


def mark_fine_tuning(
    ax: Axes, rounds: Any, values: Any, colour: str, method: str, markersize: float
) -> None:
    """The steps after a method's planned rounds (fedavg_ft's fine-tuning) as a labelled
    star of its colour, rather than a jump of its line."""
    ax.plot(
        rounds,
        values,
        color=colour,
        marker="*",
        markersize=markersize,
        linestyle="None",
        label=f"{method}: fine-tuned (after the last round)",
    )


MARKERS = ("o", "s", "^", "D", "v", "P", "X")
"""Past ten methods each method gets a marker too; seven markers (prime to ten and twenty)
keep each colour-and-marker pair unique up to 140 methods."""


def method_style(index: int, count: int) -> tuple[str, str | None]:
    """The colour and marker of the ``index``-th of ``count`` methods. Up to ten methods:
    matplotlib's ten default colours and no marker. Past ten: twenty colours (the ten, then
    their lighter shades from tab20) so no two of the first twenty methods share a colour,
    and a marker each. Figures of one setting index the same method list, so a method looks
    the same in each of them."""
    if count <= 10:
        return f"C{index}", None
    slot = index % 20
    colour = TAB20[2 * slot] if slot < 10 else TAB20[2 * (slot - 10) + 1]
    return colour, MARKERS[index % len(MARKERS)]


def clipped_error(value: float, spread: float, low: float = 0.0, high: float = 100.0) -> list:
    """An error bar of ± ``spread`` around ``value`` that stops at ``low`` and ``high`` (a
    percentage cannot leave 0-100, a variance cannot go below 0), as errorbar takes it."""
    return [[max(0.0, min(spread, value - low))], [max(0.0, min(spread, high - value))]]


def plot_accuracy_vs_variance(
    summaries: list[dict[str, Any]], path: Path | str, config: Mapping[str, Any] | None = None
) -> Path:
    """Write ``accuracy_vs_variance_figure`` as a PNG."""
    return _save(accuracy_vs_variance_figure(summaries, config), path)


def accuracy_vs_variance_figure(
    summaries: list[dict[str, Any]], config: Mapping[str, Any] | None = None
) -> Figure:
    """Mean vs variance of per-client test accuracy, one labelled point per method (colour
    and marker as in accuracy_by_round.png), with the std across seeds as an error bar for
    multi-seed aggregates (clipped to 0-100 %); ``config`` names the setting.

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
        seed_std = summary.get("seed_std_test_acc")
        yerr = None if seed_std is None else clipped_error(y, seed_std * 100)
        colour, marker = method_style(index, len(summaries))
        ax.errorbar([x], [y], yerr=yerr, fmt=marker or "o", color=colour, capsize=3)
        ax.annotate(summary["method"], (x, y), textcoords="offset points", xytext=(5, 5))
    ax.margins(0.15)
    ax.set_title(setting_title(config or {}))
    ax.set_xlabel("variance of client test accuracy (%²)")
    ax.set_ylabel("mean client test accuracy (%)")
    ax.grid(alpha=0.3)
    return fig


def plot_adjacency_heatmaps(records: RunRecords, path: Path | str) -> Path | None:
    """Write ``adjacency_heatmaps_figure`` as a PNG; None, writing nothing, for a method
    without graphs."""
    fig = adjacency_heatmaps_figure(records)
    return None if fig is None else _save(fig, path)


def adjacency_heatmaps_figure(records: RunRecords) -> Figure | None:
    """The collaboration graph at the first, middle and last rounds that have one.

    Panels share one colour scale so weights compare across rounds. When the record names
    the clients' true groups (``data.true_groups``: a grouped or label-flipped partition),
    clients are ordered by group, a coloured strip above and left of each panel marks them
    and a legend titled "true group" names them; otherwise nothing is said about groups.
    """
    if not records.graphs:
        return None
    available = sorted(records.graphs)
    chosen = list(dict.fromkeys([available[0], available[len(available) // 2], available[-1]]))
    vmax = max(float(records.graphs[r].max()) for r in chosen) or 1.0
    groups = (records.config.get("data") or {}).get("true_groups")
    size = len(records.graphs[chosen[0]])
    if groups is not None and len(groups) != size:
        groups = None  # a record that does not match its graphs: say nothing rather than lie
    order = true_group_order(groups) if groups else list(range(size))

    fig = Figure(figsize=(4.2 * len(chosen) + 1, 4.4), layout="constrained")
    axes = fig.subplots(1, len(chosen), squeeze=False)[0]
    handles: list[Patch] = []
    for ax, round_index in zip(axes, chosen, strict=True):
        matrix = records.graphs[round_index]
        shown = matrix[np.ix_(order, order)]
        image = ax.imshow(shown, vmin=0.0, vmax=vmax, cmap="viridis", interpolation="nearest")
        ax.set_title(
            f"round {round_index}\nsparsity {sparsity(matrix):.0%}, symmetry {symmetry(matrix):.0%}"
        )
        by_group = ", by true group" if groups else ""
        ax.set_xlabel(f"peer j (model used){by_group}")
        ax.set_ylabel(f"client i{by_group}")
        if groups:
            handles = mark_true_groups(ax, [groups[k] for k in order])
            client_ticks(ax, order)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, ax=list(axes), label="weight client i puts on peer j")
    if handles:
        fig.legend(handles=handles, title="true group", loc="outside lower center", ncols=4)
    label = (records.config.get("resolved") or {}).get("label")
    fig.suptitle(setting_title(records.config, label))
    return fig


def true_group_order(groups: Sequence[str]) -> list[int]:
    """Clients ordered by true group, groups in the order of their first client (stable:
    a partition's consecutive blocks keep their order)."""
    first = {name: n for n, name in enumerate(dict.fromkeys(groups))}
    return sorted(range(len(groups)), key=lambda k: first[groups[k]])


def mark_true_groups(ax: Axes, ordered: Sequence[str], *, rows: bool = True) -> list[Patch]:
    """Mark the true groups of a client matrix drawn on ``ax`` (its clients in ``ordered``'s
    order, one per column and, with ``rows``, per row): a strip of one colour per group
    above the columns and left of the rows, and a white line between groups. Returns one
    legend handle per group, labelled with its name."""
    names = list(dict.fromkeys(ordered))
    colour = {name: GROUP_COLOURS[n % len(GROUP_COLOURS)] for n, name in enumerate(names)}
    n = len(ordered)
    for k, name in enumerate(ordered):
        ax.add_patch(Rectangle((k - 0.5, -1.6), 1, 1, color=colour[name], label="_group"))
        if rows:
            ax.add_patch(Rectangle((-1.6, k - 0.5), 1, 1, color=colour[name], label="_group"))
    for k in range(1, n):
        if ordered[k] != ordered[k - 1]:
            ax.axvline(k - 0.5, color="white", linewidth=1.2)
            if rows:
                ax.axhline(k - 0.5, color="white", linewidth=1.2)
    ax.set_xlim(-1.7 if rows else -0.5, n - 0.5)
    ax.set_ylim(ax.get_ylim()[0], -1.7)
    return [Patch(color=colour[name], label=name) for name in names]


GROUP_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d")
"""True groups' strip colours (ColorBrewer Dark2), apart from the heatmaps' viridis."""


def client_ticks(ax: Axes, order: Sequence[int], *, rows: bool = True) -> None:
    """Label a client matrix's positions with the client ids they show (about 25 at most)."""
    step = -(-len(order) // 25)
    positions = list(range(0, len(order), step))
    labels = [str(order[p]) for p in positions]
    ax.set_xticks(positions, labels, fontsize=6 if len(positions) > 12 else None)
    if rows:
        ax.set_yticks(positions, labels, fontsize=6 if len(positions) > 12 else None)
