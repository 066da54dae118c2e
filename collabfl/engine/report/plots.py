"""Plots of a run or of several methods' runs; each function writes one PNG.

Figures are built on matplotlib's Agg canvas directly rather than through pyplot, so
plotting needs no screen and leaves no global figure state behind in long processes.
"""

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from collabfl.engine.report.graph_stats import sparsity, symmetry
from collabfl.engine.report.run_dir import RunRecords
from collabfl.engine.report.setting import seeds_text, setting_title
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
    """Mean benign test accuracy per round, one line per method (its own colour and marker)
    in two panels sharing the y axis: the best-validation model, what results report, with
    a light band of ± one std (across clients for one seed, across seeds for several;
    clipped to 0-100 %), and the current model, line only. A curve identical to an earlier
    method's is drawn dashed over it, so both show; a step after the planned rounds
    (fedavg_ft's fine-tuning) is a star at an x tick labelled "fine-tune"; the DPFL set-up
    round is marked, rounds in which a run missed clients shaded, and one legend right of
    the panels says what each mark is. The title names the setting and the seed(s).

    The panels differ when training overfits or a graph method destabilises late."""
    by_method = _seed_runs(runs)
    seeds = max((len(r) for r in by_method.values()), default=0)
    fig = Figure(figsize=(13, 5), layout="constrained")
    best_ax, now_ax = fig.subplots(1, 2, sharey=True)
    drawn: dict[str, np.ndarray] = {}
    fine_tune_at: set[int] = set()
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
        style: dict[str, Any] = {"color": colour, "marker": marker, "markersize": 5}
        if same:  # dashes over the same line: the one beneath shows in the gaps
            style |= {"linestyle": OVER_DASHES, "markerfacecolor": "none", "markersize": 8}
        label = f"{method} (same curve as {same})" if same else method
        best_ax.plot(rounds[kept], best[kept], label=label, **style)
        now_ax.plot(rounds[kept], current[kept], label="_current", **style)
        low, high = np.clip(best - spread, 0, 100), np.clip(best + spread, 0, 100)
        if not same:  # the same band twice would darken into another colour
            best_ax.fill_between(rounds[kept], low[kept], high[kept], color=colour, alpha=0.15)
        if not kept.all():  # a step after the planned rounds: fedavg_ft's fine-tuning
            mark_fine_tuning(best_ax, rounds[~kept], best[~kept], colour, method, markersize=12)
            now_ax.plot(rounds[~kept], current[~kept], color=colour, marker="*", markersize=12,
                        linestyle="None", label="_fine-tuned")  # fmt: skip
            fine_tune_at |= {int(r) for r in rounds[~kept]}
    across = f"{seeds} seeds" if seeds > 1 else "clients"
    for ax in (best_ax, now_ax):
        _mark_rounds(ax, by_method, labelled=ax is best_ax)
        _round_axis(ax, fine_tune_at)
        ax.grid(alpha=0.3)
    best_ax.set_title(f"best-validation model (what results report)\nband: ± std across {across}")
    now_ax.set_title("current model (this round's)\nline only")
    attacked = any(
        malicious_clients(r.rows) for seeds_runs in by_method.values() for r in seeds_runs
    )
    best_ax.set_ylabel(f"mean test accuracy of {'benign ' if attacked else ''}clients (%)")
    best_ax.set_ylim(0, 100)
    configs = [r.config for seeds_runs in by_method.values() for r in seeds_runs]
    only = next(iter(by_method)) if len(by_method) == 1 else None
    fig.suptitle(f"{setting_title(configs[0] if configs else {}, only)}{seeds_text(configs)}")
    handles, _ = best_ax.get_legend_handles_labels()
    band = Patch(color="grey", alpha=0.15, label=f"± std across {across}")
    if handles:
        fig.legend(handles=[*handles, band], loc="outside right upper", title="method")
    fig.supxlabel(textwrap.fill(best_validation_caption(by_method), 150), fontsize=9)
    return fig


OVER_DASHES = (0, (4, 3))
"""The dash pattern of a curve drawn over an identical earlier one."""


def _mark_rounds(ax: Axes, by_method: Mapping[str, list[RunRecords]], labelled: bool) -> None:
    """Shade the rounds some run missed clients in and mark DPFL's set-up round."""
    for count, missing in enumerate(_rounds_missing_clients(by_method)):
        label = "rounds missing clients" if count == 0 and labelled else "_missing"
        ax.axvspan(missing - 0.5, missing + 0.5, color="grey", alpha=0.12, label=label)
    if any(m.split(":")[0] in SETUP_ROUND_METHODS for m in by_method):
        label = "DPFL set-up (BGGC)" if labelled else "_set-up"
        ax.axvline(0, color="black", linestyle=":", label=label)


def _round_axis(ax: Axes, fine_tune_at: set[int]) -> None:
    """Integer round ticks; a fine-tuning step's position is labelled "fine-tune", not
    given a round number past the planned rounds."""
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not fine_tune_at:
        return
    ticks = ax.get_xticks()
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    # A round tick closer than one step to the wide "fine-tune" label would run into it.
    rounds = [t for t in ticks if 0 <= t <= min(fine_tune_at) - step]
    positions = [*rounds, *sorted(fine_tune_at)]
    ax.set_xticks(positions, [f"{t:.0f}" for t in rounds] + ["fine-tune"] * len(fine_tune_at))


def best_validation_caption(by_method: Mapping[str, list[RunRecords]]) -> str:
    """What the best-validation curve is, and for methods whose clients pick between their
    post-training and aggregated models (DPFL), that it is the better of the two."""
    caption = (
        "best-validation model: each client's model with the highest validation accuracy "
        "so far (ties keep the earlier one)"
    )
    both = [
        m
        for m, seeds_runs in by_method.items()
        if any(row.get("best_candidate") for r in seeds_runs for row in r.rows)
    ]
    if both:
        caption += (
            f"; for {', '.join(both)} the better of the client's post-training (local) "
            "and aggregated models, which is why it can start above the current model"
        )
    return caption


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
"""Seven markers, prime to ten and twenty: each colour-and-marker pair is unique up to 140
methods."""


def method_style(index: int, count: int) -> tuple[str, str]:
    """The colour and marker of the ``index``-th of ``count`` methods: a colour from a
    qualitative palette (up to ten methods matplotlib's ten, tab10; past ten, twenty: the
    ten, then their lighter shades from tab20, so no two of the first twenty share one) and
    a marker, so methods stay apart in grey print and where lines cross. Figures of one
    setting index the same method list, so a method looks the same in each of them."""
    marker = MARKERS[index % len(MARKERS)]
    if count <= 10:
        return f"C{index}", marker
    slot = index % 20
    return (TAB20[2 * slot] if slot < 10 else TAB20[2 * (slot - 10) + 1]), marker


def clipped_error(
    value: float, spread: float, low: float = 0.0, high: float = 100.0
) -> list[list[float]]:
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
    points = []
    for index, summary in enumerate(summaries):
        mean, var = summary.get("mean_test_acc"), summary.get("var_test_acc")
        if mean is None or var is None:
            continue
        x, y = var * 100**2, mean * 100
        seed_std = summary.get("seed_std_test_acc")
        yerr = None if seed_std is None else clipped_error(y, seed_std * 100)
        colour, marker = method_style(index, len(summaries))
        ax.errorbar([x], [y], yerr=yerr, fmt=marker, color=colour, capsize=3)
        points.append((summary["method"], x, y))
    for (method, x, y), offset in zip(points, label_offsets(points), strict=True):
        ax.annotate(method, (x, y), textcoords="offset points", xytext=offset)
    ax.margins(0.15)
    ax.set_title(f"{setting_title(config or {})}{_which_seeds(summaries, config or {})}")
    ax.set_xlabel("variance of client test accuracy (%²)")
    ax.set_ylabel("mean client test accuracy (%)")
    seeds = max((len(s.get("seeds") or []) for s in summaries), default=0)
    if any(s.get("seed_std_test_acc") is not None for s in summaries):
        ax.set_xlabel(
            f"variance of client test accuracy (%², mean over {seeds} seeds)\n"
            f"bars: std across seeds of the mean accuracy (sample std, ddof=1)"
        )
    ax.grid(alpha=0.3)
    return fig


NEAR = 0.08
"""Points closer than this (as a share of each axis's span) would have their labels meet."""


def label_offsets(points: Sequence[tuple[str, float, float]]) -> list[tuple[int, int]]:
    """Where each point's label goes, in points from it: above right, or below right when a
    point above it that is near already has its label there (methods with close results,
    such as Ditto and FedAvg+FT, would otherwise print one name over the other)."""
    if not points:
        return []
    xs, ys = [x for _, x, _ in points], [y for _, _, y in points]
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    offsets: list[tuple[int, int]] = [(5, 5)] * len(points)
    above: list[int] = []
    for i in sorted(range(len(points)), key=lambda k: -points[k][2]):
        _, x, y = points[i]
        crowded = any(
            abs(points[j][1] - x) / span_x < NEAR and abs(points[j][2] - y) / span_y < NEAR
            for j in above
            if offsets[j] == (5, 5)
        )
        offsets[i] = (5, -12) if crowded else (5, 5)
        above.append(i)
    return offsets


def _which_seeds(summaries: list[dict[str, Any]], config: Mapping[str, Any]) -> str:
    """The seeds a scatter shows: an aggregate's (its summaries list them), else the run's."""
    aggregated = sorted({int(seed) for s in summaries for seed in s.get("seeds") or []})
    return seeds_text([{"seed": seed} for seed in aggregated] if aggregated else [config])


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

    # padded: the suptitle sat right on the middle panel's title
    fig = Figure(figsize=(4.2 * len(chosen) + 1, 4.6), layout=ConstrainedLayoutEngine(h_pad=0.12))
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
    fig.suptitle(f"{setting_title(records.config, label)}{seeds_text([records.config])}")
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
