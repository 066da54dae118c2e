"""Through the CLI: --seeds, live per-round progress from compare's workers, TensorBoard."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.engine import experiment, tracking
from collabfl.engine.progress import ProgressBoard
from collabfl.engine.report.run_dir import read_run
from tests.support.cli_runs import invoke, small_args

pytestmark = pytest.mark.federation


def test_compare_over_seeds_in_workers_shows_every_round_and_reports_the_seed_spread(
    mnist1d_cache: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[str, str, int]] = []
    show, finished = ProgressBoard.show, ProgressBoard.finished

    def record_show(board: ProgressBoard, update: Any) -> None:
        events.append(("show", update.label, update.round))
        show(board, update)

    def record_finished(board: ProgressBoard, label: str, rounds: int) -> None:
        events.append(("finished", label, rounds))
        finished(board, label, rounds)

    monkeypatch.setattr(ProgressBoard, "show", record_show)
    monkeypatch.setattr(ProgressBoard, "finished", record_finished)
    caplog.set_level(logging.INFO, logger="collabfl.progress")
    out = tmp_path / "seeds"
    args = small_args(mnist1d_cache, "jobs=2")
    result = invoke(
        "compare", *args, "--methods", "local,dpfl", "--seeds", "0,1", "--out", str(out)
    )

    # every round of every method reached the parent before the method's result did
    for label in ("local", "dpfl"):
        mine = [e for e in events if e[1] == label]
        assert mine == [*(("show", label, r) for r in range(3)), ("finished", label, 3)] * 2
    lines = [r.getMessage() for r in caplog.records if r.name == "collabfl.progress"]
    assert sum(line.startswith("round 3/3 dpfl: mean val acc ") for line in lines) == 2
    assert len(lines) == 2 * 2 * 3

    per_seed = {s: json.loads((out / f"seed_{s}" / "summary.json").read_text()) for s in (0, 1)}
    for seed in (0, 1):
        assert read_run(out / f"seed_{seed}" / "dpfl").config["seed"] == seed
    summary = json.loads((out / "summary.json").read_text())
    assert [s["method"] for s in summary] == ["local", "dpfl"]
    for aggregate in summary:
        accs = [next(s for s in per_seed[k] if s["method"] == aggregate["method"]) for k in (0, 1)]
        assert aggregate["seeds_finished"] == "2/2"
        assert aggregate["mean_test_acc"] == pytest.approx(
            sum(a["mean_test_acc"] for a in accs) / 2
        )
        assert aggregate["seed_std_test_acc"] is not None
    assert "mean ± std over 2 seeds" in result.output
    assert (out / "accuracy_by_round.png").stat().st_size > 0
    assert json.loads((out / "seeds.json").read_text())["seeds"] == [0, 1]


def test_an_interrupted_seed_is_left_out_and_said(
    mnist1d_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = experiment.run_comparison

    def second_seed_interrupted(config: Any, specs: Any, out_dir: Path, *rest: Any) -> Any:
        if out_dir.name == "seed_1":
            raise KeyboardInterrupt
        return real(config, specs, out_dir, *rest)

    monkeypatch.setattr(experiment, "run_comparison", second_seed_interrupted)
    out = tmp_path / "cut"
    args = small_args(mnist1d_cache, "method=local")
    result = CliRunner().invoke(app, ["simulate", *args, "--seeds", "0,1", "--out", str(out)])
    assert result.exit_code == 130, result.output
    (aggregate,) = json.loads((out / "summary.json").read_text())
    assert aggregate["seeds"] == [0]
    assert aggregate["seeds_finished"] == "1/2"
    assert aggregate["status"] == "interrupted"
    assert "| local (interrupted; 1/2 seeds) |" in (out / "results.md").read_text()
    refused = CliRunner().invoke(app, ["simulate", *args, "--seeds", "0,1", "--out", str(out)])
    assert refused.exit_code == 2  # the folder holds a run


@pytest.mark.parametrize("seeds", ["0,x", "1,1", "-1,2", ","])
def test_bad_seeds_are_refused_in_one_line(tmp_path: Path, seeds: str) -> None:
    out = tmp_path / "never"
    result = CliRunner().invoke(app, ["simulate", "--seeds", seeds, "--out", str(out)])
    assert result.exit_code == 2
    assert "--seeds" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


class FakeWriter:
    """Stands in for torch's SummaryWriter: records what the sink writes."""

    made: ClassVar[list[FakeWriter]] = []

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.scalars: list[tuple[str, float, int]] = []
        self.closed = False
        FakeWriter.made.append(self)

    def add_scalar(self, tag: str, value: float, global_step: int) -> None:
        self.scalars.append((tag, value, global_step))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_the_tensorboard_sink_writes_each_rounds_means(
    mnist1d_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracking, "summary_writer_class", lambda: FakeWriter)
    FakeWriter.made.clear()
    out, board = tmp_path / "run", tmp_path / "tb"
    args = small_args(mnist1d_cache)
    invoke("simulate", *args, "--tensorboard", str(board), "--out", str(out))
    (writer,) = FakeWriter.made
    assert writer.log_dir == str(board / "dpfl" / "seed_0")
    assert writer.closed
    rows = read_run(out / "dpfl").rows
    for step in range(3):
        accs = [r["test_acc"] for r in rows if r["round"] == step]
        written = [v for tag, v, s in writer.scalars if tag == "accuracy/test" and s == step]
        assert written == [pytest.approx(sum(accs) / len(accs))]
    assert {tag for tag, _, _ in writer.scalars} >= {"accuracy/val", "loss/train"}


def test_tensorboard_without_the_package_fails_in_one_line_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["simulate", "--tensorboard", str(tmp_path / "tb"), "--out", str(out)]
    )
    assert result.exit_code == 2
    assert "tensorboard package" in result.output
    assert "pip install 'collabfl[tracking]'" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_tensorboard_event_files_read_back(mnist1d_cache: Path, tmp_path: Path) -> None:
    """The event file TensorBoard reads holds the run's scalars (the dev extras install the
    tensorboard package; the test above covers its absence)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = [*small_args(mnist1d_cache, "method=local", "rounds=2")]
    args += ["--tensorboard", str(tmp_path / "tb"), "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(app, ["simulate", *args])

    assert result.exit_code == 0, result.output
    events = EventAccumulator(str(tmp_path / "tb" / "local" / "seed_0"))
    events.Reload()
    assert [e.step for e in events.Scalars("accuracy/test")] == [0, 1]


def test_a_federation_refuses_tensorboard_rather_than_ignoring_it(tmp_path: Path) -> None:
    out = tmp_path / "fed"
    args = ["federation", "up", "--set", f"tracking.tensorboard={tmp_path}", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "simulate and compare only" in result.output
    assert not out.exists()


def test_a_fine_tuning_step_after_the_last_round_never_shows_past_its_total(caplog) -> None:
    """fedavg_ft's fine-tuning step is a round after the planned ones: its bar used to end
    at 21/20 and its log line say "round 21/20"."""
    from io import StringIO

    from rich.console import Console
    from rich.progress import Progress

    from collabfl.engine.progress import RoundUpdate

    progress = Progress(console=Console(file=StringIO()))
    board = ProgressBoard(progress, ["fedavg_ft"], {"fedavg_ft": 3})
    with caplog.at_level(logging.INFO, logger="collabfl.progress"):
        for t in range(4):  # rounds 0-2, then the fine-tuning step as round 3
            board.show(RoundUpdate("fedavg_ft", t, 3, 0.5, 0.5))
        board.finished("fedavg_ft", 4)  # the summary counts the step as a round
    task = progress.tasks[0]
    assert task.completed == task.total == 4
    assert "round 4/3" not in caplog.text
    assert "after round 3/3 fedavg_ft: mean val acc 50.00%" in caplog.text
