"""A run folder's retention: what grows every round is bounded, the result is kept whole,
and what reads a pruned folder says which rounds it covers (issue #32, soak)."""

import json
from pathlib import Path

import pytest

from collabfl.api.results import RunResult
from collabfl.engine.config import ConfigError, load_config
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.recording import MethodRecorder
from collabfl.engine.report.plots import plot_adjacency_heatmaps
from collabfl.engine.report.run_dir import MESSAGES_FILE, Retention, RunWriter, read_run
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.rounds import RoundOutcome

SMALL = Retention(graphs_keep_last=5, graphs_keep_every=10, messages_max_bytes=400)


def _graph_rounds(run: Path) -> list[int]:
    return sorted(int(p.stem.removeprefix("round_")) for p in (run / "graphs").glob("*.json"))


def test_graph_files_are_kept_for_the_last_rounds_and_every_nth(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, retention=SMALL)
    for r in range(30):
        writer.log_graph(r, 3, [(0, 1, 0.5)])
    assert _graph_rounds(tmp_path) == [0, 10, 20, 25, 26, 27, 28, 29]


def test_a_resumed_run_goes_on_pruning_what_it_wrote_before(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, retention=SMALL)
    for r in range(14):
        writer.log_graph(r, 3, [(0, 1, 0.5)])
    resumed = RunWriter(tmp_path, resume_after=11, retention=SMALL)  # 12 and 13 are redone
    assert _graph_rounds(tmp_path) == [0, 9, 10, 11]
    for r in range(12, 20):
        resumed.log_graph(r, 3, [(0, 1, 0.5)])
    assert _graph_rounds(tmp_path) == [0, 10, 15, 16, 17, 18, 19]


def test_graphs_every_round_keeps_them_all(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, retention=Retention(graphs_keep_last=2, graphs_keep_every=1))
    for r in range(6):
        writer.log_graph(r, 2, [])
    assert _graph_rounds(tmp_path) == list(range(6))


def test_messages_are_rotated_by_size_into_a_bounded_number_of_files(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, retention=SMALL)
    for r in range(60):
        writer.log_message({"round": r, "client": 0, "round_trip_s": 0.25})
    files = sorted(p.name for p in tmp_path.glob(f"{MESSAGES_FILE}*"))
    assert files == [MESSAGES_FILE, f"{MESSAGES_FILE}.1", f"{MESSAGES_FILE}.2"]
    assert all((tmp_path / name).stat().st_size <= 400 for name in files)
    newest = [json.loads(line)["round"] for line in (tmp_path / MESSAGES_FILE).open()]
    assert newest[-1] == 59

    RunWriter(tmp_path, resume_after=20, retention=SMALL)  # a resume drops later rounds
    for name in files:
        path = tmp_path / name
        assert all(json.loads(line)["round"] <= 20 for line in path.read_text().splitlines())


def test_metrics_are_whole_but_compact(tmp_path: Path) -> None:
    spec = parse_method_spec("dpfl", load_config(None))
    recorder = MethodRecorder(spec, tmp_path, 2, "mlp", 100)
    metrics = {c: ClientMetrics(test_acc=0.5, best_test_acc=0.25 * c) for c in range(2)}
    written = recorder.record(RoundOutcome(0, metrics), {1: 7})
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "null" not in text and ", " not in text
    assert read_run(tmp_path).rows == written  # every field back, None where left out
    assert written[0]["gain"] is None and written[1]["coordinator_bytes"] == 7


def _pruned_run(tmp_path: Path) -> tuple[MethodRecorder, dict]:
    overrides = ["retention.graphs_keep_last=4", "retention.graphs_keep_every=5"]
    spec = parse_method_spec("dpfl", load_config(None, overrides))
    recorder = MethodRecorder(spec, tmp_path, 3, "mlp", 100)
    for r in range(12):
        metrics = {c: ClientMetrics(best_test_acc=0.5) for c in range(3)}
        recorder.record(RoundOutcome(r, metrics, graph=[(0, 1, 0.1 * r), (1, 2, 1.0)]), {})
    return recorder, recorder.finish(1.0)


def test_a_pruned_run_is_summarised_saying_which_graphs_it_covers(tmp_path: Path) -> None:
    _, summary = _pruned_run(tmp_path)
    assert _graph_rounds(tmp_path) == [0, 5, 8, 9, 10, 11]
    assert summary["rounds"] == 12  # every round's metrics are kept
    assert summary["rounds_by_participants"] == {"3": 12}
    assert (summary["graph_first_round"], summary["graph_last_round"]) == (0, 11)
    assert summary["graph_rounds_kept"] == 6
    assert "last 4 rounds" in summary["graph_retention"]
    assert "multiples of 5" in summary["graph_retention"]
    assert (tmp_path / "graph_heatmaps.png").stat().st_size > 0


def test_readers_of_a_pruned_run_see_only_the_rounds_kept(tmp_path: Path) -> None:
    _, summary = _pruned_run(tmp_path)
    records = read_run(tmp_path)
    assert sorted(records.graphs) == [0, 5, 8, 9, 10, 11]
    assert plot_adjacency_heatmaps(records, tmp_path / "again.png") is not None
    result = RunResult.from_records(summary, records, tmp_path)
    assert sorted(result.graphs) == [0, 5, 8, 9, 10, 11]
    assert len(result.history) == 36


def test_a_short_run_keeps_every_graph_and_claims_no_pruning(tmp_path: Path) -> None:
    spec = parse_method_spec("dpfl", load_config(None))
    recorder = MethodRecorder(spec, tmp_path, 2, "mlp", 100)
    for r in range(3):
        metrics = {c: ClientMetrics(best_test_acc=0.5) for c in range(2)}
        recorder.record(RoundOutcome(r, metrics, graph=[(0, 1, 1.0)]), {})
    summary = recorder.finish(1.0)
    assert summary["graph_rounds_kept"] == 3 and "graph_retention" not in summary


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("retention.graphs_keep_last=0", "retention.graphs_keep_last"),
        ("retention.graphs_keep_every=-1", "retention.graphs_keep_every"),
        ("retention.messages_max_mib=0", "retention.messages_max_mib"),
        ("retention.messages_keep=1000", "retention.messages_keep"),
        ("retention.keep=3", "retention.keep"),
    ],
)
def test_a_bad_retention_is_refused_naming_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(None, [override])
