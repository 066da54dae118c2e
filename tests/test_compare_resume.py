"""Ctrl-C on ``compare`` leaves a partial summary and results.md; ``--resume`` runs only what
did not finish, into the same folder, and ends with the comparison a run in one go writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.engine import experiment
from tests.support.cli_runs import IN_THIS_PROCESS, invoke, small_args

pytestmark = pytest.mark.slow


def _args(cache: Path, *extra: str) -> list[str]:
    return [*small_args(cache, "rounds=2", *extra), *IN_THIS_PROCESS]


def _cut_fedavg_after_round_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """fedavg is interrupted (as by Ctrl-C) once its round 1 is recorded."""
    real = experiment.run_method

    def run_method(spec: Any, data: Any, splits: Any, device: Any, run_dir: Path, on_round: Any):
        def after(update: Any) -> None:
            on_round(update)
            if spec.label == "fedavg" and update.round == 1:
                raise KeyboardInterrupt

        return real(spec, data, splits, device, run_dir, after)

    monkeypatch.setattr(experiment, "run_method", run_method)


def _numbers(out: Path) -> list[dict[str, Any]]:
    """summary.json without what no two runs share (timings)."""
    return [
        {k: v for k, v in s.items() if not k.endswith("_s")}
        for s in json.loads((out / "summary.json").read_text())
    ]


def test_an_interrupted_compare_is_summarised_then_resumed_as_if_run_in_one_go(
    mnist1d_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, args = tmp_path / "cut", _args(mnist1d_cache)
    command = ["compare", "--methods", "local,fedavg,ditto", "--out", str(out), *args]
    with monkeypatch.context() as patch:
        _cut_fedavg_after_round_1(patch)
        cut = CliRunner().invoke(app, command)
    assert cut.exit_code == 130, cut.output
    local, fedavg, ditto = json.loads((out / "summary.json").read_text())
    assert local["status"] == "finished" and local["mean_test_acc"] is not None
    assert fedavg == {"method": "fedavg", "status": "interrupted", "rounds": 2, "rounds_planned": 2}
    assert ditto["status"] == "interrupted" and ditto["rounds"] == 0  # never started
    caption = (out / "results.md").read_text().splitlines()[0]
    assert "Partial: fedavg, ditto did not finish (interrupted)." in caption
    assert (out / "accuracy_by_round.png").exists()

    kept = (out / "local" / "summary.json").read_text()
    invoke(*command, "--resume")
    assert (out / "local" / "summary.json").read_text() == kept  # not run again
    assert "Partial" not in (out / "results.md").read_text()
    whole = tmp_path / "whole"
    invoke("compare", "--methods", "local,fedavg,ditto", "--out", str(whole), *args)
    assert _numbers(out) == _numbers(whole)


def test_a_resume_with_other_settings_is_refused_in_one_line(
    mnist1d_cache: Path, tmp_path: Path
) -> None:
    out, local = tmp_path / "run", _args(mnist1d_cache, "method=local", "rounds=1")
    invoke("simulate", "--out", str(out), *local)
    before = (out / "local" / "summary.json").read_text()
    refused = CliRunner().invoke(
        app, ["simulate", "--resume", "--out", str(out), *local, "--set", "data.alpha=0.5"]
    )
    assert refused.exit_code == 2, refused.output
    assert "other settings (data.alpha)" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert (out / "local" / "summary.json").read_text() == before
    both = CliRunner().invoke(app, ["compare", "--resume", "--overwrite", "--out", str(out)])
    assert both.exit_code == 2 and "pick one" in both.output
    seeds = CliRunner().invoke(
        app, ["simulate", "--resume", "--seeds", "0,1", "--out", str(out), *_args(mnist1d_cache)]
    )
    assert seeds.exit_code == 2 and "resume without --seeds" in seeds.output


def test_a_resumed_multi_seed_run_runs_only_the_seed_that_did_not_finish(
    mnist1d_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "seeds"
    command = [
        "simulate",
        "--seeds",
        "0,1",
        "--out",
        str(out),
        *_args(mnist1d_cache, "method=local"),
    ]
    real = experiment.run_comparison

    def second_seed_interrupted(config: Any, specs: Any, out_dir: Path, *rest: Any) -> Any:
        if out_dir.name == "seed_1":
            raise KeyboardInterrupt
        return real(config, specs, out_dir, *rest)

    with monkeypatch.context() as patch:
        patch.setattr(experiment, "run_comparison", second_seed_interrupted)
        assert CliRunner().invoke(app, command).exit_code == 130
    kept = (out / "seed_0" / "local" / "summary.json").read_text()
    invoke(*command, "--resume")
    assert (out / "seed_0" / "local" / "summary.json").read_text() == kept
    (aggregate,) = json.loads((out / "summary.json").read_text())
    assert aggregate["seeds"] == [0, 1] and aggregate["status"] == "finished"


def test_the_fine_tuning_step_is_recorded_as_such(mnist1d_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "ft"
    invoke("simulate", "--out", str(out), *_args(mnist1d_cache, "method=fedavg_ft"))
    rows = [json.loads(line) for line in (out / "fedavg_ft" / "metrics.jsonl").open()]
    assert {r["round"] for r in rows if r.get("phase") == "fine_tune"} == {2}
    assert all("phase" not in r for r in rows if r["round"] < 2)
    (summary,) = json.loads((out / "summary.json").read_text())
    assert (summary["rounds"], summary["rounds_planned"], summary["fine_tune_round"]) == (3, 2, 2)
