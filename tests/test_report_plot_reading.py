"""The comparison plots as a reader meets them (issue #43 item 6): every method told apart
in the legend, bands inside 0-100 %, the seed named, the error bars and the best-validation
curve explained, the fine-tuning step labelled, and the heatmaps' title off the panels.
Checked on matplotlib's objects, not pixels."""

from __future__ import annotations

from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from collabfl.engine.report.graph_stats import adjacency
from collabfl.engine.report.plots import (
    accuracy_by_round_figure,
    accuracy_vs_variance_figure,
    adjacency_heatmaps_figure,
)
from collabfl.engine.report.run_dir import RunRecords

QUICKSTART = ["local", "fedavg", "fedavg_ft", "fedprox", "ditto", "dpfl"]
DATA = {"dataset": "mnist1d", "num_clients": 3, "partition": "iid"}


def _records(level: float, seed: int = 0, rounds: int = 3, **row: Any) -> RunRecords:
    rows = [
        {"round": r, "client": c, "test_acc": level, "best_test_acc": level + 0.1 * c, **row}
        for r in range(rounds)
        for c in range(3)
    ]
    config = {"rounds": 3, "seed": seed, "data": DATA}
    return RunRecords(config=config, rows=rows, graphs={}, summary=None)


def _quickstart_runs() -> dict[str, RunRecords]:
    runs = {m: _records(0.2 + 0.1 * k) for k, m in enumerate(QUICKSTART)}
    runs["fedavg_ft"] = _records(0.3, rounds=4)  # fedavg's curve, then its fine-tuning step
    runs["fedavg"] = _records(0.3)
    return runs


def test_every_method_has_its_own_colour_and_marker_in_the_legend() -> None:
    figure = accuracy_by_round_figure(_quickstart_runs())
    (legend,) = figure.legends
    entries = {
        str(text.get_text()).split(" ")[0]: handle
        for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
        if str(text.get_text()).split(" ")[0] in QUICKSTART and "fine-tuned" not in text.get_text()
    }
    assert sorted(entries) == sorted(QUICKSTART)
    colours = {m: to_hex(h.get_color()) for m, h in entries.items()}
    markers = {m: h.get_marker() for m, h in entries.items()}
    assert len(set(colours.values())) == 6 and len(set(markers.values())) == 6
    drawn = {to_hex(line.get_color()) for line in figure.axes[0].get_lines()}
    assert set(colours.values()) <= drawn  # fedavg's line is there, in its legend colour


def test_the_accuracy_axis_is_0_to_100_percent() -> None:
    figure = accuracy_by_round_figure({"local": _records(0.95), "fedavg": _records(0.02)})
    assert all(ax.get_ylim() == (0, 100) for ax in figure.axes)


def test_each_figure_names_its_seed_or_seeds() -> None:
    one = accuracy_by_round_figure({"local": _records(0.5, seed=3)})
    assert one.get_suptitle().endswith(", seed 3")
    both = accuracy_by_round_figure({"local": [_records(0.5, seed=0), _records(0.6, seed=1)]})
    assert both.get_suptitle().endswith(", seeds 0, 1")
    summary = {"method": "local", "mean_test_acc": 0.5, "var_test_acc": 0.01}
    scatter = accuracy_vs_variance_figure([summary], {"seed": 3, "data": DATA})
    assert scatter.axes[0].get_title().endswith(", seed 3")
    assert "bars" not in scatter.axes[0].get_xlabel()  # one seed: no error bars to explain


def test_the_fine_tuning_step_is_labelled_fine_tune_not_a_round_past_the_last() -> None:
    figure = accuracy_by_round_figure(_quickstart_runs())
    for ax in figure.axes:
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels[-1] == "fine-tune"
        assert all(int(label) < 3 for label in labels[:-1])


def test_the_best_validation_curve_is_explained_and_dpfl_s_choice_named() -> None:
    runs = {"dpfl": _records(0.5, best_candidate="local"), "local": _records(0.4)}
    caption = " ".join(accuracy_by_round_figure(runs).get_supxlabel().split())  # unwrapped
    assert "highest validation accuracy so far" in caption
    assert "for dpfl the better of the client's post-training (local) and aggregated" in caption
    plain = accuracy_by_round_figure({"local": _records(0.4)}).get_supxlabel()
    assert "post-training" not in plain


def test_the_heatmaps_title_stands_clear_of_the_panel_titles() -> None:
    graphs = {r: adjacency(3, [(0, 1, 0.5), (1, 0, 0.5)]) for r in range(3)}
    config = {"seed": 0, "data": DATA, "resolved": {"label": "dpfl"}}
    figure = adjacency_heatmaps_figure(RunRecords(config, [], graphs, None))
    assert figure is not None
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    suptitle = figure._suptitle  # matplotlib keeps the Text here
    assert suptitle is not None and suptitle.get_text().endswith(", seed 0")
    bottom = suptitle.get_window_extent(renderer).y0
    tops = [ax.title.get_window_extent(renderer).y1 for ax in figure.axes[:3]]
    assert bottom - max(tops) >= 0.05 * figure.dpi  # a visible gap, not touching


def _drawn(figure):
    """The renderer of ``figure`` drawn once, so that every text sits where it is shown."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def _overlapping(texts, renderer) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]
    return [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b)
    ]


def test_the_last_round_tick_leaves_room_for_fine_tune() -> None:
    """The quickstart's 20 rounds put a tick at 18, two rounds before fine-tune's: the
    labels ran together as "18fine-tune"."""
    runs = {"fedavg": _records(0.3, rounds=20), "fedavg_ft": _records(0.3, rounds=21)}
    for records in runs.values():
        records.config["rounds"] = 20
    figure = accuracy_by_round_figure(runs)
    renderer = _drawn(figure)
    for ax in figure.axes:
        labels = ax.get_xticklabels()
        assert "fine-tune" in [t.get_text() for t in labels]
        assert not _overlapping(labels, renderer)


def test_close_methods_keep_their_labels_apart() -> None:
    """Ditto and FedAvg+FT as the quickstart left them (84.8 % at 175 %², 83.2 % at 165 %²):
    one name printed over the other before."""
    summaries = [
        {"method": "local", "mean_test_acc": 0.8205, "var_test_acc": 0.028088},
        {"method": "fedavg", "mean_test_acc": 0.5602, "var_test_acc": 0.046880},
        {"method": "fedavg_ft", "mean_test_acc": 0.8321, "var_test_acc": 0.016498},
        {"method": "fedprox", "mean_test_acc": 0.5330, "var_test_acc": 0.049978},
        {"method": "ditto", "mean_test_acc": 0.8479, "var_test_acc": 0.017496},
        {"method": "dpfl", "mean_test_acc": 0.9092, "var_test_acc": 0.006603},
    ]
    figure = accuracy_vs_variance_figure(summaries)
    renderer = _drawn(figure)
    (ax,) = figure.axes
    assert sorted(t.get_text() for t in ax.texts) == sorted(s["method"] for s in summaries)
    assert not _overlapping(ax.texts, renderer)
