"""collabfl.api.compare: several methods over seeds on the user's model and data, the
outputs `collabfl compare --seeds` writes, and a result that reads well (issue #26)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import collabfl.api as cf
from tests.support.user_code import make_net
from tests.test_python_api import FAST, arrays

pytestmark = pytest.mark.slow

METHODS = ["local", cf.DPFL(budget=2)]


def compare(**kwargs) -> cf.Comparison:
    kwargs.setdefault("seeds", [0, 1])
    return cf.compare(METHODS, make_net, overrides=FAST, **{**arrays(), **kwargs})


def untimed(rows):
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


def test_compare_runs_each_method_per_seed_and_writes_the_outputs(tmp_path):
    result = compare(out=tmp_path / "cmp")
    assert [m.method for m in result.methods] == ["local", "dpfl:budget=2"]
    dpfl = result["dpfl:budget=2"]
    alone = cf.run("dpfl:budget=2", make_net, overrides=FAST, seed=1, **arrays())
    assert untimed(dpfl.runs[1].history) == untimed(alone.history)
    means = [run.mean_test_acc for run in dpfl.runs]
    assert dpfl.mean_test_acc == pytest.approx(np.mean(means))
    assert dpfl.std_across_seeds == pytest.approx(np.std(means, ddof=1))
    stds = [run.std_test_acc for run in dpfl.runs]
    assert dpfl.std_across_clients == pytest.approx(np.mean(stds))
    assert dpfl.runs[0].run_dir == tmp_path / "cmp" / "seed_0" / "dpfl_budget_2"

    out = tmp_path / "cmp"
    for folder in (out, out / "seed_0", out / "seed_1"):
        for name in ("summary.json", "results.md", "accuracy_by_round.png"):
            assert (folder / name).stat().st_size > 0, folder / name
    aggregate = {s["method"]: s for s in json.loads((out / "summary.json").read_text())}
    assert aggregate["dpfl:budget=2"]["mean_test_acc"] == pytest.approx(dpfl.mean_test_acc)
    assert aggregate["dpfl:budget=2"]["seed_std_test_acc"] == pytest.approx(dpfl.std_across_seeds)
    cell = f"{dpfl.mean_test_acc * 100:.2f} ± {dpfl.std_across_seeds * 100:.2f}"
    assert f"| dpfl:budget=2 | {cell} |" in (out / "results.md").read_text()


def test_the_result_reads_as_rows_a_dataframe_and_a_short_repr(monkeypatch):
    result = compare()
    assert result.out is None and all(r.run_dir is None for m in result.methods for r in m.runs)
    by_method = result.rows()
    assert [r["method"] for r in by_method] == ["local", "dpfl:budget=2"]
    assert set(by_method[0]) == {
        "method",
        "seeds",
        "mean_test_acc",
        "std_across_seeds",
        "std_across_clients",
    }
    assert len(result.rows("seed")) == 2 * 2 and len(result.rows("client")) == 2 * 2 * 3
    with pytest.raises(ValueError, match="level must be one of"):
        result.rows("round")

    fake = types.ModuleType("pandas")
    fake.DataFrame = lambda rows: ("frame", rows)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pandas", fake)
    assert result.to_dataframe("seed") == ("frame", result.rows("seed"))
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install pandas.*rows\(\)"):
        result.to_dataframe()

    shown = repr(result).splitlines()
    assert len(shown) == 3 and "across seeds" in shown[0] and "history" not in repr(result)
    assert shown[2].split()[0] == "dpfl:budget=2" and "%" in shown[2]
    run = result["dpfl:budget=2"].runs[0]
    assert repr(run).startswith("<RunResult dpfl:budget=2: finished after 2 rounds")
    assert len(repr(run)) < 150
    graphs = run.graphs
    assert sorted(graphs) == [0, 1] and all(g.shape == (3, 3) for g in graphs.values())
    assert result["local"].runs[0].graphs == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seeds": []}, "non-empty list"),
        ({"seeds": 0}, "non-empty list"),
        ({"seeds": [0, 0]}, "more than once"),
        ({"seeds": [-1]}, "integers >= 0"),
        ({"methods": []}, "methods is empty"),
        ({"methods": ["local", "local"]}, r"\['local'\] more than once"),
        ({"methods": ["local", "dpfl:budget=9"]}, r"dpfl\.budget: 9 peers"),
        ({"methods": ["local", "fedavg:budget=2"]}, "fedavg takes no options"),
        ({"rounds": 0}, "rounds"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(tmp_path, kwargs, message):
    methods = kwargs.pop("methods", METHODS)
    kwargs = {"seeds": [0, 1], **kwargs}
    with pytest.raises(ValueError, match=message):
        cf.compare(methods, make_net, overrides=FAST, out=tmp_path / "cmp", **kwargs, **arrays())
    assert not (tmp_path / "cmp").exists()


def test_the_notebook_style_example_runs(tmp_path):
    """examples/compare_own_data.py: own model and data, three seeds, plots (CI: ~10 s)."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "example"
    done = subprocess.run(
        [sys.executable, "examples/compare_own_data.py", "--rounds", "3", "--out", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard only: a busy CI machine is slow
        env={"PYTHONPATH": str(root), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("<Comparison of 3 methods over seeds [0, 1, 2]")
    assert [line.split()[0] for line in lines[5:8]] == ["local", "fedavg_ft", "dpfl:budget=4"]
    assert all("across seeds" in line for line in lines[5:8])
    for name in ("accuracy_by_round.png", "accuracy_vs_variance.png", "results.md"):
        assert (out / name).stat().st_size > 0
    assert len(json.loads((out / "summary.json").read_text())) == 3
