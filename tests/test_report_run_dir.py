"""RunWriter and read_run: a run written is the run read back; corrupt files are named."""

from pathlib import Path

import numpy as np
import pytest

from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.recording import MethodRecorder
from collabfl.engine.report.run_dir import ROW_FIELDS, RunWriter, read_run
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.rounds import RoundOutcome


def _row(round_: int, client: int, acc: float) -> dict:
    """A row as the recorder makes it: every recorded field, None where not reported."""
    return dict.fromkeys(ROW_FIELDS) | {
        "round": round_,
        "client": client,
        "train_loss": 0.5,
        "val_loss": None,
        "val_acc": acc,
        "test_loss": 0.7,
        "test_acc": acc,
        "best_val_acc": acc,
        "best_test_acc": acc,
        "bytes_fetched": 1000 * client,
        "peak_peer_models": client,
        "num_collaborators": None,
        "malicious": client == 1,
    }


def test_round_trip(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    config = {"method": "dpfl", "seed": 3, "nested": {"lr": 0.01, "sizes": [1, 2]}}
    rounds = [[_row(r, c, 0.1 * (r + c)) for c in range(2)] for r in range(3)]
    writer.write_config(config)
    for rows in rounds:
        writer.log_round(rows)
    writer.log_graph(0, 3, [(0, 1, 0.5), (1, 2, 1.0)])
    writer.log_graph(2, 3, [(2, 0, np.float32(0.25))])
    writer.write_summary({"method": "dpfl", "mean_test_acc": 0.5})

    records = read_run(tmp_path / "run")

    assert records.config == config
    assert records.rows == [row for rows in rounds for row in rows]
    assert sorted(records.graphs) == [0, 2]
    expected_0 = np.array([[0, 0.5, 0], [0, 0, 1.0], [0, 0, 0]])
    np.testing.assert_array_equal(records.graphs[0], expected_0)
    assert records.graphs[2][2, 0] == 0.25 and records.graphs[2].sum() == 0.25
    assert records.summary == {"method": "dpfl", "mean_test_acc": 0.5}
    assert (tmp_path / "run" / "graphs" / "round_0002.json").exists()
    assert not list((tmp_path / "run").rglob("*.tmp"))


def test_summary_is_optional_and_rewrites_replace(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.write_config({"a": 1})
    assert read_run(tmp_path).summary is None
    writer.write_config({"a": 2})
    assert read_run(tmp_path).config == {"a": 2}


def test_refuses_a_folder_holding_another_run(tmp_path: Path) -> None:
    RunWriter(tmp_path).write_config({})
    with pytest.raises(FileExistsError):
        RunWriter(tmp_path)


def test_malformed_line_is_named(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.write_config({})
    writer.log_round([_row(0, 0, 0.5)])
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"round": 1, "client": \n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 2"):
        read_run(tmp_path)


def test_non_object_line_is_named(tmp_path: Path) -> None:
    RunWriter(tmp_path).write_config({})
    (tmp_path / "metrics.jsonl").write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"line 1: expected a JSON object"):
        read_run(tmp_path)


def test_malformed_config_is_named(tmp_path: Path) -> None:
    RunWriter(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json: malformed JSON"):
        read_run(tmp_path)


def test_graph_with_edge_outside_the_clients_is_named(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.write_config({})
    writer.log_graph(4, 2, [(0, 2, 1.0)])
    with pytest.raises(ValueError, match=r"round_0004\.json"):
        read_run(tmp_path)


def test_coalitions_round_trip_and_absent_for_other_methods(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "collab")
    writer.write_config({})
    writer.log_coalitions(0, [[0, 1], [2]])
    writer.log_coalitions(2, [[np.int64(0), 1, 2]])
    assert read_run(tmp_path / "collab").coalitions == {0: [[0, 1], [2]], 2: [[0, 1, 2]]}
    assert (tmp_path / "collab" / "coalitions.jsonl").read_text().splitlines()[0] == (
        '{"round": 0, "coalitions": [[0, 1], [2]]}'
    )

    RunWriter(tmp_path / "plain").write_config({})
    assert read_run(tmp_path / "plain").coalitions == {}
    assert not (tmp_path / "plain" / "coalitions.jsonl").exists()


def test_resume_truncates_coalitions_like_metrics(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.write_config({})
    for round_index in range(4):
        writer.log_round([_row(round_index, 0, 0.5)])
        writer.log_coalitions(round_index, [[0], [1, 2]])
    writer.write_summary({"method": "fedcollab"})

    resumed = RunWriter(tmp_path, resume_after=1)
    records = read_run(tmp_path)
    assert sorted(records.coalitions) == [0, 1]
    assert [row["round"] for row in records.rows] == [0, 1]
    assert records.summary is None
    resumed.log_coalitions(2, [[0, 1, 2]])
    assert read_run(tmp_path).coalitions == {0: [[0], [1, 2]], 1: [[0], [1, 2]], 2: [[0, 1, 2]]}


def test_recorder_writes_coalitions_and_summarises_them(tmp_path: Path) -> None:
    spec = parse_method_spec("fedavg", load_config(None))
    recorder = MethodRecorder(spec, tmp_path, 3, "mlp", 100)
    metrics = {c: ClientMetrics(best_test_acc=0.5, coalition=int(c > 0)) for c in range(3)}
    recorder.record(RoundOutcome(0, metrics, coalitions=[[0], [1, 2]]), {})
    recorder.record(RoundOutcome(1, metrics), {})
    summary = recorder.finish(1.0)
    records = read_run(tmp_path)
    assert records.coalitions == {0: [[0], [1, 2]]}
    assert [row["coalition"] for row in records.rows] == [0, 1, 1] * 2
    assert (summary["coalitions_last"], summary["num_coalitions_last"]) == ([[0], [1, 2]], 2)
    assert records.summary is not None and records.summary["num_coalitions_last"] == 2


@pytest.mark.parametrize(
    "line",
    [
        '{"round": 0, "coalitions": [[0, -1]]}',
        '{"round": 0, "coalitions": [0, 1]}',
        '{"coalitions": [[0]]}',
        '{"round": 0, "coalitions": [["0"]]}',
    ],
)
def test_malformed_coalitions_are_named(tmp_path: Path, line: str) -> None:
    RunWriter(tmp_path).write_config({})
    (tmp_path / "coalitions.jsonl").write_text(line + "\n")
    with pytest.raises(ValueError, match=r"coalitions\.jsonl, record 1"):
        read_run(tmp_path)
