"""accuracy_by_round.png rules a reader can trust at a glance (issue #26 feature 5): bands
inside 0-100 %, every method told apart past ten methods, legends outside the curves,
"benign" only when there are attackers, and a fine-tuning step shown as a labelled marker
rather than a jump of the curve."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection

from collabfl.engine.report.plots import accuracy_by_round_figure
from collabfl.engine.report.run_dir import RunRecords

CONFIG = {"rounds": 4, "data": {"dataset": "mnist1d", "num_clients": 3, "partition": "iid"}}


def _records(accuracies: list[float], rounds: int = 4, malicious: bool = False) -> RunRecords:
    attacker = 2 if malicious else None
    rows = [
        {"round": r, "client": c, "test_acc": a, "best_test_acc": a, "malicious": c == attacker}
        for r in range(rounds)
        for c, a in enumerate(accuracies)
    ]
    return RunRecords(config=CONFIG, rows=rows, graphs={}, summary=None)


def test_a_band_never_leaves_0_to_100_percent() -> None:
    figure = accuracy_by_round_figure({"local": _records([1.0, 1.0, 0.4])})
    (band,) = [c for c in figure.axes[0].collections if isinstance(c, PolyCollection)]
    heights = band.get_paths()[0].vertices[:, 1]
    assert heights.max() <= 100 and heights.min() >= 0


def test_past_ten_methods_each_has_its_own_colour_and_marker() -> None:
    runs = {f"m{k}": _records([0.5 + k / 100] * 3) for k in range(13)}
    ax = accuracy_by_round_figure(runs).axes[0]
    styles = {
        (str(line.get_color()), str(line.get_marker()))
        for line in ax.get_lines()
        if str(line.get_label()).startswith("m")
    }
    assert len(styles) == 13
    assert len({colour for colour, _ in styles}) == 13  # no two share a colour either


def test_the_legend_sits_outside_the_axes() -> None:
    figure = accuracy_by_round_figure({"local": _records([0.5] * 3), "fedavg": _records([0.6] * 3)})
    FigureCanvasAgg(figure).draw()
    right = max(ax.get_window_extent().x1 for ax in figure.axes)
    inside = [a for ax in figure.axes for a in ax.get_children() if type(a).__name__ == "Legend"]
    (legend,) = figure.legends
    assert not inside and legend.get_window_extent().x0 >= right


def test_benign_is_said_only_when_some_clients_attack() -> None:
    plain = accuracy_by_round_figure({"fedavg": _records([0.5] * 3)}).axes[0]
    assert "benign" not in plain.get_ylabel()
    attacked = accuracy_by_round_figure({"fedavg": _records([0.5] * 3, malicious=True)}).axes[0]
    assert "benign" in attacked.get_ylabel()


def test_a_fine_tuning_step_is_a_labelled_marker_not_a_jump() -> None:
    """fedavg_ft's step after the 4 planned rounds is round 4 in its rows."""
    ax = accuracy_by_round_figure({"fedavg_ft": _records([0.5] * 3, rounds=5)}).axes[0]
    curves = [line for line in ax.get_lines() if line.get_label() in ("fedavg_ft", "_best")]
    assert curves and all(max(line.get_xdata()) == 3 for line in curves)
    (step,) = [line for line in ax.get_lines() if "fine-tun" in str(line.get_label())]
    assert list(step.get_xdata()) == [4] and step.get_linestyle() == "None"


def test_results_md_has_a_caption_naming_the_setting_the_seeds_and_what_the_spread_is(
    tmp_path,
) -> None:
    from collabfl.engine.report.comparison import write_comparison
    from collabfl.engine.report.run_dir import RunWriter

    run = tmp_path / "local"
    writer = RunWriter(run)
    writer.write_config({**CONFIG, "seed": 3})
    writer.log_round([{"round": 0, "client": 0, "test_acc": 0.5, "best_test_acc": 0.5}])
    summary = {"method": "local", "status": "finished", "mean_test_acc": 0.5, "std_test_acc": 0.0}
    write_comparison(tmp_path, [summary], {"local": run})
    caption = (tmp_path / "results.md").read_text().splitlines()[0]
    assert "mnist1d, N=3, IID" in caption and "seed 3" in caption
    assert "mean ± std over clients (population std, ddof=0)" in caption
    aggregate = {**summary, "seeds": [0, 1], "seed_std_test_acc": 0.01}
    write_comparison(tmp_path, [aggregate], {"local": [run, run]})
    caption = (tmp_path / "results.md").read_text().splitlines()[0]
    assert "mean ± std over 2 seeds (sample std, ddof=1)" in caption and "seed 3" not in caption


def test_rounds_that_miss_clients_are_shaded() -> None:
    records = _records([0.5] * 3)
    records.rows[:] = [r for r in records.rows if (r["round"], r["client"]) != (2, 1)]
    ax = accuracy_by_round_figure({"fedavg": records}).axes[0]
    shaded = [p for p in ax.patches if "missing" in str(p.get_label())]
    assert len(shaded) == 1
    (span,) = shaded
    assert (span.get_x(), span.get_x() + span.get_width()) == (1.5, 2.5)
    whole = accuracy_by_round_figure({"fedavg": _records([0.5] * 3)}).axes[0]
    assert not [p for p in whole.patches if "missing" in str(p.get_label())]


def test_the_reports_series_figures_tell_methods_apart_without_dashes() -> None:
    """docs/results.md's per-round figures: past ten methods a marker, never a dash (dashes
    mean the best-validation model in accuracy_by_round.png)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import report_figures

    curves = {f"m{k}": [[0.5 + k / 100] * 4] for k in range(13)}
    figure = report_figures.series_by_round_figure("t", "acc", curves)
    lines = [line for line in figure.axes[0].get_lines() if str(line.get_label()).startswith("m")]
    assert len({(str(line.get_color()), str(line.get_marker())) for line in lines}) == 13
    assert {line.get_linestyle() for line in lines} == {"-"}


def _report_figures():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import report_figures

    return report_figures


def _styles(lines) -> dict[str, tuple[str, str]]:
    return {
        str(line.get_label()).split(" ")[0]: (str(line.get_color()), str(line.get_marker()))
        for line in lines
        if str(line.get_label()).startswith("m")
    }


def test_a_method_looks_the_same_in_every_figure_of_the_report() -> None:
    """docs/results.md: 13 methods, each its own colour and marker, the same in the
    accuracy-vs-variance and the by-round figure (they index the same method list)."""
    figures = _report_figures()
    methods = [f"m{k}" for k in range(13)]
    cells = {m: {"acc": [50.0 + k, 51.0 + k], "var": [10.0, 12.0]} for k, m in enumerate(methods)}
    scatter = figures.accuracy_vs_variance_figure("t", cells)
    points = {
        str(c.get_label()): (str(c.lines[0].get_color()), str(c.lines[0].get_marker()))
        for c in scatter.axes[0].containers
    }
    curves = {m: [[0.5] * 4] for m in methods}
    by_round = _styles(figures.series_by_round_figure("t", "acc", curves).axes[0].get_lines())
    assert len(set(points.values())) == 13 and points == by_round


def test_a_method_not_drawn_keeps_the_others_styles() -> None:
    figures = _report_figures()
    curves = {f"m{k}": [[0.5] * 4] if k != 3 else [] for k in range(12)}
    styles = _styles(figures.series_by_round_figure("t", "acc", curves).axes[0].get_lines())
    everything = {f"m{k}": [[0.5] * 4] for k in range(12)}
    full = _styles(figures.series_by_round_figure("t", "acc", everything).axes[0].get_lines())
    assert "m3" not in styles and styles == {m: s for m, s in full.items() if m != "m3"}


def test_the_reports_error_bars_stay_inside_0_to_100_percent() -> None:
    figures = _report_figures()
    cells = {"local": {"acc": [99.0, 100.0, 100.0], "var": [0.0, 0.0, 3.0]}}
    ax = figures.accuracy_vs_variance_figure("t", cells).axes[0]
    (container,) = ax.containers
    ends = np.concatenate([seg.get_segments() for seg in container.lines[2]])
    assert ends[:, 1].max() <= 100 and ends[:, 0].min() >= 0  # accuracy <= 100, variance >= 0


def test_the_reports_fine_tuning_step_is_a_labelled_star_not_a_jump() -> None:
    figures = _report_figures()
    curves = {"fedavg_ft": [[50.0, 55.0, 58.0, 80.0]]}  # 3 planned rounds, then fine-tuning
    ax = figures.series_by_round_figure("t", "acc", curves, planned=3).axes[0]
    (curve,) = [line for line in ax.get_lines() if line.get_label() == "fedavg_ft (n=1)"]
    assert list(curve.get_xdata()) == [0, 1, 2]
    (star,) = [line for line in ax.get_lines() if "fine-tuned" in str(line.get_label())]
    assert list(star.get_xdata()) == [3] and star.get_marker() == "*"


def test_the_run_scatter_gives_each_of_13_methods_its_own_colour_and_marker() -> None:
    from collabfl.engine.report.plots import accuracy_vs_variance_figure

    summaries = [
        {"method": f"m{k}", "mean_test_acc": 0.5 + k / 100, "var_test_acc": 0.01} for k in range(13)
    ]
    ax = accuracy_vs_variance_figure(summaries).axes[0]
    styles = {(str(c.lines[0].get_color()), str(c.lines[0].get_marker())) for c in ax.containers}
    assert len(styles) == 13


def test_a_curve_drawn_over_another_stays_visible_and_says_whose_it_is() -> None:
    """fedavg_ft is FedAvg until its fine-tuning: drawn the same, it hid FedAvg's lines."""
    fedavg_ft = _records([0.5, 0.6, 0.7], rounds=5)  # CONFIG plans 4: round 4 fine-tunes
    runs = {"fedavg": _records([0.5, 0.6, 0.7]), "fedavg_ft": fedavg_ft}
    ax = accuracy_by_round_figure(runs).axes[0]
    lines = {str(line.get_label()): line for line in ax.get_lines()}
    over = lines["fedavg_ft (same curve as fedavg)"]
    assert lines["fedavg"].get_linestyle() == "-" and over.get_linestyle() == "--"
    assert over.get_color() != lines["fedavg"].get_color()
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1  # one band for the two: twice would darken into another colour
    different = accuracy_by_round_figure({"a": _records([0.5] * 3), "b": _records([0.6] * 3)})
    assert {str(line.get_label()) for line in different.axes[0].get_lines()} >= {"a", "b"}
