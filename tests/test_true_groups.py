"""Coalition and graph figures mark the true groups (issue #26 feature 5): a run on a
partition with true groups (FedCollab's blocks, label-flipped attackers) records each
client's group in config.json, and the figures order clients by group and name the groups
in a "true group" legend; a partition without groups records none and the figures say
nothing about groups."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle
from rich.console import Console

from collabfl.client.data import true_groups
from collabfl.engine.config import load_config
from collabfl.engine.experiment import run_comparison
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.report.plots import adjacency_heatmaps_figure
from collabfl.engine.report.run_dir import RunRecords

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import report_figures

pytestmark = pytest.mark.slow

SMALL = ["data.num_train=800", "data.num_test=400", "data.num_clients=4", "rounds=1", "jobs=1"]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (["data.partition=label_groups"], ["group 0", "group 1", "group 2", "group 3"]),
        (["data.partition=iid", "data.label_flip_fraction=0.5"], None),  # checked below
        (["data.partition=iid"], None),
    ],
)
def test_the_record_carries_each_clients_true_group(
    mnist1d_cache: Path, tmp_path: Path, setting: list[str], expected: list[str] | None
) -> None:
    cache = f"data.cache_dir={mnist1d_cache}"
    config = load_config(None, [*SMALL, *setting, cache])
    run_comparison(config, [parse_method_spec("local", config)], tmp_path, Console(quiet=True))
    data = json.loads((tmp_path / "local" / "config.json").read_text())["data"]
    if "data.label_flip_fraction=0.5" in setting:
        groups = data["true_groups"]
        flipped = [k for k, name in enumerate(groups) if name == "label-flipped"]
        assert len(flipped) == 2 and groups.count("benign") == 2
        rows = [json.loads(line) for line in (tmp_path / "local" / "metrics.jsonl").open()]
        assert flipped == sorted(int(r["client"]) for r in rows if r["malicious"])
    elif expected is None:
        assert "true_groups" not in data
    else:
        assert data["true_groups"] == expected
        assert data["partition"] == "label_groups"  # the config's section, extended


def test_flipped_clients_inside_a_block_form_a_group_of_their_own() -> None:
    meta = {"num_clients": 4, "groups": [0, 0, 1, 1], "malicious_clients": [1]}
    assert true_groups(meta) == ["group 0", "group 0, label-flipped", "group 1", "group 1"]
    assert true_groups({"num_clients": 3, "malicious_clients": []}) is None


GROUPS = ["group 0", "group 1", "group 0", "group 1"]
"""Clients 0 and 2 in one group: the figures show them side by side, as 0, 2, 1, 3."""


def _graph_run(groups: list[str] | None) -> RunRecords:
    data = {"dataset": "mnist1d", "num_clients": 4, "partition": "label_groups"}
    if groups is not None:
        data["true_groups"] = groups
    matrix = np.arange(16, dtype=float).reshape(4, 4) / 16
    return RunRecords(config={"data": data}, rows=[], graphs={0: matrix}, summary=None)


def _legend_entries(legend) -> tuple[str, list[str]]:
    return legend.get_title().get_text(), [t.get_text() for t in legend.get_texts()]


def test_the_graph_heatmaps_order_clients_by_true_group_and_name_the_groups() -> None:
    figure = adjacency_heatmaps_figure(_graph_run(GROUPS))
    assert figure is not None
    ax = figure.axes[0]
    (legend,) = figure.legends
    assert _legend_entries(legend) == ("true group", ["group 0", "group 1"])
    (image,) = [c for c in ax.get_children() if isinstance(c, AxesImage)]
    order = [0, 2, 1, 3]
    matrix = np.arange(16, dtype=float).reshape(4, 4) / 16
    assert np.array_equal(image.get_array(), matrix[np.ix_(order, order)])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "2", "1", "3"]
    strips = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(strips) == 8  # one cell per client above the columns and left of the rows
    colours = [tuple(p.get_facecolor()) for p in strips[::2]]
    assert colours[0] == colours[1] != colours[2] == colours[3]
    assert "true group" in ax.get_ylabel()


def test_without_true_groups_the_heatmaps_say_nothing_about_groups() -> None:
    for groups in (None, ["group 0", "group 1"]):  # none, or not one per client
        figure = adjacency_heatmaps_figure(_graph_run(groups))
        assert figure is not None
        ax = figure.axes[0]
        assert not figure.legends and not ax.patches
        assert "group" not in ax.get_ylabel() + ax.get_xlabel()


def test_the_report_graph_and_coalition_figures_mark_the_true_groups() -> None:
    matrix = np.full((4, 4), 0.25)
    graph = report_figures.graph_heatmap_figure("t", matrix, GROUPS)
    assert graph is not None
    legend = graph.axes[0].get_legend()
    assert _legend_entries(legend) == ("true group", ["group 0", "group 1"])
    coalitions = {"fedcollab s0": [[0, 2], [1, 3]], "fedavg s0": [[0, 1, 2, 3]]}
    figure = report_figures.coalition_structure_figure("t", coalitions, 4, GROUPS)
    assert figure is not None
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["true group", *coalitions]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "2", "1", "3"]
    (image,) = [c for c in ax.get_children() if isinstance(c, AxesImage)]
    # fedcollab found the groups: in group order its strip is two solid blocks.
    assert list(image.get_array()[0]) == [0, 0, 1, 1]
    assert _legend_entries(ax.get_legend()) == ("true group", ["group 0", "group 1"])
    plain = report_figures.coalition_structure_figure("t", coalitions, 4)
    assert plain is not None and plain.axes[0].get_legend() is None
    assert "true group" not in [t.get_text() for t in plain.axes[0].get_yticklabels()]
