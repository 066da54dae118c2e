"""Multi-seed aggregates, the plots a paper's reader expects, and the table at 80 columns."""

from __future__ import annotations

import pytest
from matplotlib.collections import PolyCollection
from rich.console import Console

from collabfl.engine.report.plots import (
    accuracy_by_round_figure,
    accuracy_vs_variance_figure,
    setting_title,
)
from collabfl.engine.report.run_dir import RunRecords
from collabfl.engine.report.seeds import aggregate_seeds
from collabfl.engine.report.table import (
    COLUMNS,
    NARROW_HEADERS,
    method_label,
    print_results,
    results_markdown,
)

CONFIG = {"data": {"dataset": "mnist1d", "num_clients": 3, "partition": "dirichlet", "alpha": 0.1}}


def _records(offset: float) -> RunRecords:
    rows = [
        {"round": r, "client": c, "test_acc": 0.1 * r + 0.1 * c + offset,
         "best_test_acc": 0.1 * r + 0.1 * c + offset}
        for r in range(4)
        for c in range(3)
    ]  # fmt: skip
    return RunRecords(config=CONFIG, rows=rows, graphs={}, summary=None)


def _summary(method: str, acc: float, status: str = "finished") -> dict:
    return {
        "method": method,
        "status": status,
        "mean_test_acc": acc,
        "std_test_acc": 0.05,
        "var_test_acc": 0.0025,
        "clients_reported": "3/3",
        "peak_peer_models": 2,
        "wall_time_s": 10.0,
    }


def test_only_finished_seeds_are_averaged_and_the_count_is_said() -> None:
    by_seed = {
        0: [_summary("dpfl", 0.80), _summary("local", 0.70)],
        1: [_summary("dpfl", 0.90), _summary("local", 0.72)],
        2: [_summary("dpfl", 0.10, status="interrupted"), _summary("local", 0.74)],
    }
    dpfl, local = aggregate_seeds(["dpfl", "local"], by_seed, [0, 1, 2])
    assert dpfl["seeds"] == [0, 1]
    assert dpfl["seeds_finished"] == "2/3"
    assert dpfl["status"] == "interrupted"
    assert dpfl["mean_test_acc"] == pytest.approx(0.85)
    assert dpfl["seed_std_test_acc"] == pytest.approx(0.0707107, rel=1e-5)  # sample std
    assert method_label(dpfl) == "dpfl (interrupted; 2/3 seeds)"
    assert local["seeds_finished"] == "3/3"
    assert local["status"] == "finished"
    assert method_label(local) == "local"
    line = results_markdown([dpfl, local]).splitlines()[2]
    assert line.startswith("| dpfl (interrupted; 2/3 seeds) | 85.00 ± 7.07 |")


def test_a_seed_that_never_finished_leaves_no_numbers() -> None:
    (aggregate,) = aggregate_seeds(["dpfl"], {}, [0, 1])
    assert aggregate["seeds_finished"] == "0/2"
    assert aggregate["mean_test_acc"] is None
    assert results_markdown([aggregate]).splitlines()[2].startswith("| dpfl (interrupted; 0/2")


def test_the_accuracy_plot_names_the_setting_bands_clients_and_marks_the_dpfl_set_up() -> None:
    figure = accuracy_by_round_figure({"dpfl:budget=0.1": _records(0.0), "local": _records(0.1)})
    ax = figure.axes[0]
    assert "mnist1d, N=3, Dirichlet α=0.1" in figure.get_suptitle()
    assert "across clients" in ax.get_title()
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    set_up = [line for line in ax.get_lines() if line.get_label() == "DPFL set-up (BGGC)"]
    assert len(set_up) == 1
    assert list(set_up[0].get_xdata()) == [0, 0]


def test_across_seeds_the_band_is_the_seeds_spread_and_no_dpfl_means_no_mark() -> None:
    figure = accuracy_by_round_figure({"local": [_records(0.0), _records(0.2)]})
    ax = figure.axes[0]
    assert figure.get_suptitle().startswith("local: mnist1d, N=3")
    assert "across 2 seeds" in ax.get_title()
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    # seed means per round are r/10 + 0.1 and r/10 + 0.3: a sample std of 14.14 points
    top = band.get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(30 + 20 + 14.1421, abs=1e-3)
    assert not [line for line in ax.get_lines() if "set-up" in str(line.get_label())]


def test_the_scatter_names_the_setting_and_shows_the_seed_spread() -> None:
    aggregate = aggregate_seeds(
        ["dpfl"], {0: [_summary("dpfl", 0.8)], 1: [_summary("dpfl", 0.9)]}, [0, 1]
    )
    (ax,) = accuracy_vs_variance_figure(aggregate, CONFIG).axes
    assert ax.get_title() == f"{setting_title(CONFIG)}, seeds 0, 1"
    assert "bars: std across seeds" in ax.get_xlabel()
    assert len(ax.containers) == 1  # the error bar
    assert ax.containers[0].has_yerr


WIDE_LABELS = ["dpfl_random:budget=0.1", "fedprox_ft:mu=0.01", "local"]


def _wide_summaries() -> list[dict]:
    summaries = [_summary(label, 0.8) for label in WIDE_LABELS]
    summaries[0] |= {"status": "interrupted", "rounds": 3, "rounds_planned": 20}
    for s in summaries:
        s |= {
            "bytes_fetched_per_client_round": 1.4 * 1024**2,
            "coordinator_bytes_per_client_round": 318 * 1024,
            "graph_sparsity_last": 0.9,
            "graph_symmetry_last": 0.12,
        }
    return summaries


def test_at_80_columns_no_header_or_label_is_cut_short() -> None:
    console = Console(record=True, width=80)
    print_results(_wide_summaries(), console)
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for header in COLUMNS:
        for word in NARROW_HEADERS.get(header, header).split():
            assert word in text, word
    method_column = " ".join(
        line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")
    )
    assert "dpfl_random:budget=0.1 (interrupted after 3/20 rounds)" in method_column
    for label in WIDE_LABELS:
        assert label in text  # whole in the traffic table too
    assert "1.4 MiB" in text and "318.0 KiB" in text and "90.0%" in text


def test_a_wide_terminal_gets_one_table_with_the_full_headers() -> None:
    console = Console(record=True, width=250)
    print_results(_wide_summaries(), console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "Method" in line)
    assert all(name in header for name in COLUMNS)
    assert text.count("Method") == 1
