"""The reproduction report (benchmarks/reproduce.py) from fabricated units: the figures it
draws or says it cannot, the per-round records a unit keeps, the method selection, the notes
beside a table and the CE synthetic section. Nothing here trains a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import report_figures
import reproduce

pytestmark = pytest.mark.slow


def _unit(method: str, seed: int, *, stored: bool, setting: str = "label_flip") -> dict:
    """A finished unit as run_unit leaves it; ``stored``: with the per-round records."""
    unit = {
        "setting": setting,
        "seed": seed,
        "method": method,
        "summary": {
            "mean_test_acc": 0.8 + seed / 100,
            "var_test_acc": 0.01,
            "bytes_fetched_per_client_round": 1024.0,
            "coordinator_bytes_per_client_round": 0.0,
            "benign_edges_to_malicious_last": 0.25 if method.startswith("dpfl") else None,
        },
        "client_acc": {"0": 0.8, "1": 0.7, "2": 0.9, "3": 0.6},
        "malicious": [3],
        "wall_s": 2.0,
        "machine": "test machine",
    }
    if stored:
        unit["curve"] = [0.5, 0.6, 0.7]
        if method.startswith("dpfl"):
            unit |= reproduce.graph_record(
                {0: np.full((4, 4), 0.25), 1: np.eye(4) * 0.5 + 0.1}, [3]
            )
    return unit


def _args(tmp_path: Path, name: str = "results") -> argparse.Namespace:
    return argparse.Namespace(clients=4, rounds=3, epochs=1.0, report_name=name)


@pytest.fixture
def docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "docs"
    monkeypatch.setattr(reproduce, "DOCS", folder)
    monkeypatch.setattr(reproduce, "NOTES", folder / "notes")
    return folder


def test_a_unit_keeps_the_benign_curve_and_the_graph_records():
    rows = [
        {"round": 0, "client": 0, "test_acc": 0.5},
        {"round": 0, "client": 1, "test_acc": 0.7},
        {"round": 0, "client": 2, "test_acc": 0.0},  # an attacker: left out
        {"round": 1, "client": 0, "test_acc": None},
    ]
    assert reproduce.benign_curve(rows, {2}) == [pytest.approx(0.6), None]
    graphs = {0: np.array([[0, 0.5, 0.5], [0.5, 0, 0.5], [0.2, 0.8, 0]]), 3: np.eye(3)}
    record = reproduce.graph_record(graphs, [2])
    assert record["graph_last"] == np.eye(3).tolist()
    # Round 0: benign rows 0 and 1 put 1.0 of their 2.0 weight on client 2; round 3: none.
    assert record["to_attackers_by_round"] == {0: 0.5, 3: 0.0}
    assert reproduce.graph_record({}, [2]) == {}
    assert reproduce.unit_folder("dpfl:budget=0.1") == "dpfl_budget-0.1"  # resumes old units
    assert reproduce.unit_folder("dpfl:budget=0.2,ggc_tie=larger") == (
        "dpfl_budget-0.2_ggc_tie-larger"
    )


def test_figures_are_drawn_from_what_the_units_hold(docs: Path, tmp_path: Path):
    results = [
        _unit("local", 0, stored=False),
        _unit("dpfl:budget=0.1", 0, stored=True),
        _unit("dpfl:budget=0.1", 1, stored=True),
    ]
    (docs / "notes").mkdir(parents=True)
    (docs / "notes" / "label_flip.md").write_text("Measured by hand: see the commands.\n")
    (docs / "notes" / "results_intro.md").write_text("Which run made which figure.\n")
    methods = {"local", "dpfl:budget=0.1"}
    path = reproduce.write_report(
        results, [], ["label_flip"], methods, [0, 1], _args(tmp_path), total_units=4
    )
    text = path.read_text()
    assert "**partial: 3 of 4 runs finished**" in text
    # Only the chosen methods are rows; local finished one seed of two.
    assert "| `local` | 1/2 |" in text and "`fedavg`" not in text
    assert "accuracy by round (2 of 3 runs stored it): ![" in text
    assert "](results/label_flip_by_round.png)" in text
    assert "](results/label_flip_graph.png)" in text and "(seed 0)" in text
    assert "](results/label_flip_to_attackers.png)" in text
    # Units from before true groups were recorded: the graph marks their attackers.
    assert reproduce.unit_groups(results[1], 4) == ["benign"] * 3 + ["label-flipped"]
    assert reproduce.unit_groups(_unit("local", 0, stored=False) | {"malicious": []}, 4) is None
    assert "Measured by hand: see the commands." in text
    assert text.index("Which run made which figure.") < text.index("## MNIST-1D")
    for figure in ("acc_var", "by_round", "graph", "to_attackers"):
        assert (docs / "results" / f"label_flip_{figure}.png").stat().st_size > 1000
    saved = json.loads((docs / "results.json").read_text())
    assert saved["settings"]["label_flip"]["dpfl:budget=0.1"]["seeds"] == [0, 1]


def test_units_without_records_say_why_a_figure_is_missing(docs: Path, tmp_path: Path):
    results = [_unit(m, 0, stored=False) for m in ("local", "dpfl:budget=0.1")]
    path = reproduce.write_report(
        results, [], ["label_flip"], set(), [0], _args(tmp_path, "small"), total_units=2
    )
    assert path == docs / "small.md"
    text = path.read_text()
    assert "accuracy by round (0 of 2 runs stored it): not drawn, these units predate" in text
    assert "graph in the last round: not drawn" in text
    assert "| `fedavg` | 0/1 | — |" in text  # no selection: every method has a row
    assert not (docs / "small" / "label_flip_by_round.png").exists()


def test_coalition_structure_and_the_synthetic_section(docs: Path, tmp_path: Path):
    coalitions = _unit("fedcollab", 0, stored=True, setting="label_groups")
    coalitions["summary"]["coalitions_last"] = [[0, 1], [2, 3]]
    coalitions["true_groups"] = ["group 0", "group 0", "group 1", "group 1"]
    synthetic = [
        {
            "variant": variant,
            "seed": 0,
            "rows": [
                {"rho": 0.1, "coalitions": [[0, 1, 2], [3, 4, 5]], "exhaustive": [[0]]},
                {"rho": 1.0, "coalitions": [[0, 1], [2], [3], [4], [5]], "exhaustive": [[0]]},
            ],
            "wall_s": 1.0,
        }
        for variant in ("ours", "official")
    ]
    settings = ["label_groups", reproduce.SYNTHETIC]
    path = reproduce.write_report(
        [coalitions], synthetic, settings, {"fedcollab"}, [0], _args(tmp_path), total_units=3
    )
    text = path.read_text()
    assert "final coalition, against the true groups): ![" in text
    assert "](results/label_groups_coalitions.png)" in text
    assert "| ρ = 0.1, n = 2000 | `official` | 1 | s0: {0,1,2} {3,4,5} | 1/1 |" in text
    assert "| ρ = 1.0, n = 20000 | `ours` | 1 | s0: {0,1} {2} {3} {4} {5} | 0/1 |" in text
    assert "**not shown** (2 of 4 runs match)" in text
    assert "every client alone in 0 of 4 runs" in text


def test_report_figures_draw_nothing_from_nothing(tmp_path: Path):
    assert report_figures.accuracy_vs_variance("t", {}, tmp_path / "a.png") is None
    assert report_figures.series_by_round("t", "y", {"m": []}, tmp_path / "b.png") is None
    assert report_figures.coalition_structure("t", {}, 4, tmp_path / "c.png") is None
    assert not list(tmp_path.iterdir())


def test_every_figure_is_redrawn_from_the_reports_json_alone(docs: Path, tmp_path: Path):
    results = [_unit(m, 0, stored=True) for m in ("local", "dpfl:budget=0.1")]
    reproduce.write_report(results, [], ["label_flip"], set(), [0], _args(tmp_path), total_units=2)
    first = {png.name: png.read_bytes() for png in (docs / "results").iterdir()}
    for png in (docs / "results").iterdir():
        png.unlink()
    drawn = reproduce.redraw_from_json("results")
    assert (
        sorted(p.name for p in drawn)
        == sorted(first)
        == [f"label_flip_{kind}.png" for kind in ("acc_var", "by_round", "graph", "to_attackers")]
    )
    assert {p.name: p.read_bytes() for p in drawn} == first  # the records hold all they draw


def _store(out: Path, unit: dict) -> None:
    folder = out / unit["setting"] / f"s{unit['seed']}" / reproduce.unit_folder(unit["method"])
    folder.mkdir(parents=True)
    (folder / "unit.json").write_text(json.dumps(unit))


def test_a_rerun_redraws_the_record_figures_and_leaves_the_tables(docs: Path, tmp_path: Path):
    # The report's runs kept no records (units from before them), and are gone since.
    table = [_unit(m, s, stored=False) for m in ("local", "dpfl:budget=0.1") for s in (0, 1)]
    strips = {0: [[0, 1], [2, 3]], 1: [[0, 1, 2, 3]]}
    for seed in (0, 1):
        grouped = _unit("fedcollab", seed, stored=False, setting="label_groups")
        grouped["summary"] |= {"coalitions_last": strips[seed], "num_coalitions_last": 2 - seed}
        table.append(grouped)
    settings, methods = ["label_flip", "label_groups"], {"local", "dpfl:budget=0.1", "fedcollab"}
    path = reproduce.write_report(table, [], settings, methods, [0, 1], _args(tmp_path), 6)
    before, scatter = path.read_text(), (docs / "results" / "label_flip_acc_var.png").read_bytes()
    cells = json.loads((docs / "results.json").read_text())["settings"]
    assert "accuracy by round (0 of 4 runs stored it): not drawn" in before
    assert not (docs / "results" / "label_flip_graph.png").exists()
    # A rerun of seed 0 with the records, on another machine; its cells differ from the table's.
    out = tmp_path / "units"
    for unit in [_unit(m, 0, stored=True) for m in ("local", "dpfl:budget=0.1")]:
        _store(out, unit | {"machine": "the rerun machine", "summary": {"mean_test_acc": 0.1}})
    grouped = _unit("fedcollab", 0, stored=True, setting="label_groups")
    grouped["summary"] |= {"coalitions_last": strips[0], "num_coalitions_last": 2}
    grouped["true_groups"] = ["a", "a", "b", "b"]
    _store(out, grouped | {"machine": "the rerun machine"})

    drawn = reproduce.figures_from_units("results", out, settings, 3)

    assert sorted(p.name for p in drawn) == [
        "label_flip_by_round.png",
        "label_flip_graph.png",
        "label_flip_to_attackers.png",
        "label_groups_by_round.png",
    ]
    after = path.read_text()
    rerun = "seed 0, rerun on the rerun machine, final accuracies up to 70.00 pp off the table's"
    identical = "seed 0, rerun on the rerun machine, the table's accuracies to the bit"
    changed = {
        f"- accuracy by round (2 of 4 runs: {rerun}): ![",
        f"- benign weight on attackers by round (1 of 4 runs: {rerun}): ![",
        f"- `dpfl:budget=0.1` graph in the last round ({rerun}): ![",
        f"- accuracy by round (1 of 2 runs: {identical}): ![",
    }
    new_lines = [line for line in after.split("\n") if line not in before.split("\n")]
    assert {line.split("![")[0] + "![" for line in new_lines} == changed
    # Every other line (tables, claims, the scatter's line) is as it was, and so is the scatter.
    kept = [line for line in after.split("\n") if line not in new_lines]
    assert len(kept) == len(before.split("\n")) - len(changed)
    assert all(line in before.split("\n") for line in kept)
    assert (docs / "results" / "label_flip_acc_var.png").read_bytes() == scatter
    saved = json.loads((docs / "results.json").read_text())
    assert saved["settings"] == cells
    # The table has seed 1's coalitions too: a figure of seed 0 alone would show less.
    assert [line for line in kept if line.startswith("- coalition structure (")] == [
        line for line in before.split("\n") if line.startswith("- coalition structure (")
    ]
    assert saved["figures"]["label_groups"]["coalitions"]["seeds"] == [0, 1]  # the table's
    assert saved["figures"]["label_flip"]["graph"]["groups"] == ["benign"] * 3 + ["label-flipped"]
    # What was redrawn can be redrawn again from the JSON alone.
    for png in drawn:
        png.unlink()
    assert set(drawn) < set(reproduce.redraw_from_json("results"))


def test_by_round_curves_say_benign_only_when_there_are_attackers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    labels = {}

    def series_by_round(title, ylabel, curves, path, planned=None):
        labels[path.name] = ylabel

    monkeypatch.setattr(report_figures, "series_by_round", series_by_round)
    attacked = [_unit("dpfl:budget=0.1", 0, stored=True)]
    clean = [_unit("local", 0, stored=True, setting="dir") | {"malicious": []}]
    for name, units in (("label_flip", attacked), ("dir", clean)):
        records = reproduce.figure_records(name, [units[0]["method"]], units, 3)
        reproduce.draw_records(name, records, tmp_path)
    assert labels["label_flip_by_round.png"].startswith("benign clients' mean test accuracy")
    assert labels["dir_by_round.png"].startswith("mean test accuracy")


def test_a_curve_that_is_another_methods_stays_visible_and_says_so():
    curves = {"fedavg": [[50.0, 60.0]], "local": [[70.0, 72.0]], "fedcollab": [[50.0, 60.0]]}
    fig = report_figures.series_by_round_figure("t", "y", curves, planned=2)
    assert fig is not None
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {"fedavg (n=1)", "local (n=1)", "fedcollab (n=1, same curve as fedavg)"}
    # Drawn on top of fedavg's, thinner: fedavg's colour shows either side of it.
    on_top = lines["fedcollab (n=1, same curve as fedavg)"]
    assert on_top.get_linewidth() < lines["fedavg (n=1)"].get_linewidth()


def test_a_rerun_caption_says_which_accuracies_are_the_tables():
    cells = {
        "local": {"seeds": [0, 1], "acc": [80.0, 81.0]},
        "fedavg": {"seeds": [0], "acc": [50.0]},
    }
    local = _unit("local", 0, stored=False)  # 0.8: the table's 80.0
    fedavg = _unit("fedavg", 0, stored=False)  # 0.8 against 50.0
    assert reproduce.agreement([local], cells) == ", the table's accuracies to the bit"
    assert reproduce.agreement([fedavg], cells) == (
        ", final accuracies up to 30.00 pp off the table's"
    )
    assert reproduce.agreement([local, fedavg], cells) == (
        ", 1 of 2 final accuracies the table's to the bit, the others up to 30.00 pp off"
    )
    assert reproduce.agreement([_unit("local", 2, stored=False)], cells) == ""  # not in it
