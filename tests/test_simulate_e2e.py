"""End to end through the CLI: a small federation, real training, real run directories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app, split_methods
from collabfl.engine.report.run_dir import read_run
from tests.support.cli_runs import IN_THIS_PROCESS, invoke, small_args, without_timings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dpfl_run(tmp_path_factory, mnist1d_cache) -> Path:
    out = tmp_path_factory.mktemp("sim") / "run"
    invoke("simulate", *small_args(mnist1d_cache), "--out", str(out))
    return out


def test_run_directory_contents(dpfl_run):
    run = dpfl_run / "dpfl"
    for name in ("config.json", "metrics.jsonl", "summary.json", "graph_heatmaps.png"):
        assert (run / name).stat().st_size > 0, name
    for name in ("partition.npz", "accuracy_by_round.png", "accuracy_vs_variance.png"):
        assert (dpfl_run / name).stat().st_size > 0, name
    records = read_run(run)
    assert sorted(records.graphs) == [0, 1, 2]
    assert len(records.rows) == 3 * 6
    assert records.config["resolved"]["budget"] == 2
    summary = records.summary
    assert 0.0 < summary["mean_test_acc"] <= 1.0
    assert summary["peak_peer_models"] <= 2
    assert summary["bytes_fetched_total"] > 0


def test_dpfl_graph_respects_budget_every_round(dpfl_run):
    records = read_run(dpfl_run / "dpfl")
    for round_index, matrix in records.graphs.items():
        out_degree = (matrix > 0).sum(axis=1)
        assert out_degree.max() <= 2, round_index
        assert (matrix.diagonal() == 0).all()
    for row in records.rows:
        assert row["peak_peer_models"] <= 2
        assert row["num_collaborators"] <= 2


def test_same_seed_samewithout_timings(dpfl_run, mnist1d_cache, tmp_path):
    invoke("simulate", *small_args(mnist1d_cache), "--out", str(tmp_path / "again"))
    first = without_timings(read_run(dpfl_run / "dpfl").rows)
    second = without_timings(read_run(tmp_path / "again" / "dpfl").rows)
    assert first == second
    invoke("simulate", *small_args(mnist1d_cache, "seed=1"), "--out", str(tmp_path / "other"))
    assert without_timings(read_run(tmp_path / "other" / "dpfl").rows) != first


def test_compare_runs_every_method_on_one_partition(mnist1d_cache, tmp_path):
    out = tmp_path / "cmp"
    methods = "local,fedavg_ft,ditto,dpfl_random:budget=1"
    args = [*small_args(mnist1d_cache), *IN_THIS_PROCESS]
    result = invoke("compare", *args, "--methods", methods, "--out", str(out))
    summaries = json.loads((out / "summary.json").read_text())
    assert [s["method"] for s in summaries] == methods.split(",")
    assert "dpfl_random:budget=1" in result.output
    assert (out / "results.md").read_text().count("\n") == 2 + 2 + 4  # caption, table
    fedavg = read_run(out / "fedavg_ft")
    assert max(r["round"] for r in fedavg.rows) == 3  # the fine-tuning round
    assert fedavg.summary["coordinator_bytes_per_client_round"] > 0


def test_bad_config_fails_before_anything_starts(tmp_path):
    out = tmp_path / "never"
    result = CliRunner().invoke(
        app, ["simulate", "--set", "data.alpha=-2", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 2
    assert "data.alpha" in result.output and "greater than 0" in result.output
    assert not out.exists()
    result = CliRunner().invoke(app, ["compare", "--methods", "nope", "--out", str(out)])
    assert result.exit_code == 2 and "unknown method" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "setting", "message"),
    [
        ("simulate", "model.name=torch.nn:Linear", "model factory torch.nn:Linear failed when"),
        ("simulate", "data.partition_file=/no/such.npz", "data.partition_file: /no/such.npz"),
        ("simulate", "training.lrr=0.1", "training.lrr: .*did you mean lr"),
        ("federation up", "device=cuda:99", "cuda:99"),
    ],
)
def test_a_refused_run_says_why_in_one_line_and_leaves_no_out(
    mnist1d_cache, tmp_path, command, setting, message
):
    out = tmp_path / "never"
    args = [*command.split(), "--set", setting, "--set", "rounds=1", "--out", str(out)]
    args += ["--set", f"data.cache_dir={mnist1d_cache}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert re.search(message, result.output), result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_split_methods_keeps_options_with_their_method():
    assert split_methods("dpfl:budget=5,select_every=2,local, fedavg") == [
        "dpfl:budget=5,select_every=2",
        "local",
        "fedavg",
    ]


def test_parallel_compare_equals_sequential(mnist1d_cache, tmp_path):
    methods = "local,dpfl"
    common = small_args(mnist1d_cache)
    invoke(
        "compare", *common, "--set", "jobs=1", "--methods", methods, "--out", str(tmp_path / "a")
    )
    invoke(
        "compare", *common, "--set", "jobs=2", "--methods", methods, "--out", str(tmp_path / "b")
    )
    for method in methods.split(","):
        sequential = without_timings(read_run(tmp_path / "a" / method).rows)
        parallel = without_timings(read_run(tmp_path / "b" / method).rows)
        assert sequential == parallel, method


def test_pfedgraph_runs_with_poisoned_clients(mnist1d_cache, tmp_path):
    methods = "pfedgraph,pfedgraph:attack.kind=sign_flip,attack.fraction=0.34,similarity=head"
    out = tmp_path / "pfg"
    args = [*small_args(mnist1d_cache), *IN_THIS_PROCESS]
    invoke("compare", *args, "--methods", methods, "--out", str(out))
    clean = read_run(out / "pfedgraph")
    assert sorted(clean.graphs) == [0, 1, 2]
    for matrix in clean.graphs.values():
        assert (matrix.sum(axis=1) <= 1 + 1e-6).all()  # rows of W without the diagonal
    assert clean.summary["coordinator_bytes_per_client_round"] > 0
    attacked = read_run(
        out / "pfedgraph_attack.kind_sign_flip_attack.fraction_0.34_similarity_head"
    )
    malicious = {row["client"] for row in attacked.rows if row["malicious"]}
    assert len(malicious) == 2
    assert "mean_test_acc_all" in attacked.summary


def test_ipfl_market_with_roles_keeps_a_ledger(mnist1d_cache, tmp_path):
    methods = "ipfl:sellers=0.17,buyers=0.17,attackers=0.17"
    out = tmp_path / "ipfl"
    invoke("compare", *small_args(mnist1d_cache), "--methods", methods, "--out", str(out))
    records = read_run(out / "ipfl_sellers_0.17_buyers_0.17_attackers_0.17")
    for round_index in range(3):
        rows = [r for r in records.rows if r["round"] == round_index]
        assert sum(r["payment"] for r in rows) == pytest.approx(0.0, abs=1e-6)
        assert all(r["utility"] is not None for r in rows)
    assert sum(r["malicious"] for r in records.rows if r["round"] == 0) == 1
    assert sorted(records.graphs) == [0, 1, 2]
