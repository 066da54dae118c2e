"""summarize on synthetic rows with known statistics."""

import numpy as np
import pytest

from collabfl.engine.report.graph_stats import adjacency
from collabfl.engine.report.run_dir import RunRecords
from collabfl.engine.report.summary import summarize


def _row(round_: int, client: int, best_test: float | None, **extra: object) -> dict:
    row = {
        "round": round_,
        "client": client,
        "test_acc": best_test,
        "best_val_acc": None if best_test is None else best_test + 0.1,
        "best_test_acc": best_test,
        "bytes_fetched": 100,
        "peak_peer_models": 1,
        "malicious": False,
    }
    row.update(extra)
    return row


def _records(
    rows: list[dict], graphs: dict | None = None, coalitions: dict | None = None
) -> RunRecords:
    return RunRecords(
        config={}, rows=rows, graphs=graphs or {}, summary=None, coalitions=coalitions or {}
    )


def test_benign_accuracy_from_last_round() -> None:
    rows = [_row(0, c, 0.0, bytes_fetched=0) for c in range(4)]
    rows += [
        _row(1, 0, 0.5, bytes_fetched=400),
        _row(1, 1, 0.7, peak_peer_models=5),
        _row(1, 2, 0.9, bytes_fetched=300),
        _row(1, 3, 0.1, malicious=True, bytes_fetched=500),
    ]
    summary = summarize(_records(rows), method="dpfl", wall_time_s=12.5)

    assert summary["method"] == "dpfl"
    assert summary["num_clients"] == 4
    assert summary["rounds"] == 2
    assert summary["mean_test_acc"] == pytest.approx(0.7)
    assert summary["var_test_acc"] == pytest.approx(np.var([0.5, 0.7, 0.9]))
    assert summary["std_test_acc"] == pytest.approx(np.std([0.5, 0.7, 0.9]))
    assert summary["mean_test_acc_all"] == pytest.approx(np.mean([0.5, 0.7, 0.9, 0.1]))
    assert summary["var_test_acc_all"] == pytest.approx(np.var([0.5, 0.7, 0.9, 0.1]))
    assert summary["mean_best_val_acc"] == pytest.approx(0.8)
    assert summary["bytes_fetched_total"] == 400 + 100 + 300 + 500
    assert summary["bytes_fetched_per_client_round"] == pytest.approx(1300 / 8)
    assert summary["peak_peer_models"] == 5
    assert summary["graph_sparsity_first"] is None
    assert summary["benign_edges_to_malicious_last"] is None
    assert summary["wall_time_s"] == 12.5


def test_no_all_keys_without_attackers_and_missing_values_skipped() -> None:
    rows = [_row(0, 0, 0.4), _row(0, 1, 0.6), _row(0, 2, None)]
    summary = summarize(_records(rows), method="local", wall_time_s=1.0)
    assert summary["mean_test_acc"] == pytest.approx(0.5)
    assert summary["var_test_acc"] == pytest.approx(0.01)
    assert not any(key.endswith("_all") for key in summary)


def test_graph_statistics_first_and_last() -> None:
    rows = [_row(r, c, 0.5, malicious=c == 2) for r in range(3) for c in range(3)]
    first = adjacency(3, [(0, 1, 1.0), (1, 0, 1.0)])
    last = adjacency(3, [(0, 1, 0.5), (0, 2, 0.5), (1, 2, 1.0), (2, 0, 1.0)])
    summary = summarize(_records(rows, {2: last, 0: first}), method="g", wall_time_s=0.0)
    assert summary["graph_sparsity_first"] == pytest.approx(4 / 6)
    assert summary["graph_symmetry_first"] == 1.0
    assert summary["graph_sparsity_last"] == pytest.approx(2 / 6)
    assert summary["graph_symmetry_last"] == pytest.approx(1 / 3)
    assert summary["benign_edges_to_malicious_last"] == pytest.approx(1.5 / 2.0)


def test_final_coalitions_and_their_count() -> None:
    rows = [_row(r, c, 0.5) for r in range(4) for c in range(3)]
    coalitions = {0: [[0], [1], [2]], 2: [[0, 2], [1]]}
    summary = summarize(_records(rows, coalitions=coalitions), method="fc", wall_time_s=0.0)
    assert summary["coalitions_last"] == [[0, 2], [1]]
    assert summary["num_coalitions_last"] == 2


def test_methods_without_coalitions_have_no_coalition_keys() -> None:
    summary = summarize(_records([_row(0, 0, 0.5)]), method="fedavg", wall_time_s=0.0)
    assert not any("coalition" in key for key in summary)


def test_all_benign_missing_gives_none() -> None:
    summary = summarize(_records([_row(0, 0, None)]), method="x", wall_time_s=0.0)
    assert summary["mean_test_acc"] is None
    assert summary["var_test_acc"] is None
    assert summary["mean_best_val_acc"] is None


def test_empty_run_is_refused() -> None:
    with pytest.raises(ValueError, match="without metrics rows"):
        summarize(_records([]), method="x", wall_time_s=0.0)


def test_a_client_that_missed_the_last_round_counts_with_its_latest_model() -> None:
    rows = [_row(0, c, 0.5) for c in range(3)]
    rows += [_row(1, 0, 0.9), _row(1, 1, 0.7)]  # client 2 missed round 1
    summary = summarize(_records(rows), method="dpfl", wall_time_s=0.0, num_clients=3)
    assert summary["mean_test_acc"] == pytest.approx(np.mean([0.9, 0.7, 0.5]))
    assert summary["clients_reported"] == "3/3"
    assert summary["clients_in_last_round"] == 2
    assert summary["status"] == "finished"


def test_clients_that_never_reported_are_counted_against_the_mean() -> None:
    rows = [_row(0, 0, 0.9), _row(0, 1, 0.7), _row(0, 3, 0.2, malicious=True)]
    summary = summarize(_records(rows), method="dpfl", wall_time_s=0.0, num_clients=5)
    assert summary["num_clients"] == 5
    assert summary["clients_reported"] == "2/4"  # benign: 5 clients less 1 malicious
    assert summary["mean_test_acc"] == pytest.approx(0.8)


def test_a_cut_short_run_is_marked_with_its_rounds() -> None:
    records = RunRecords(
        config={"rounds": 20}, rows=[_row(0, 0, 0.5)], graphs={}, summary=None, coalitions={}
    )
    summary = summarize(records, method="dpfl", wall_time_s=0.0, status="stopped")
    assert (summary["status"], summary["rounds"], summary["rounds_planned"]) == ("stopped", 1, 20)
    with pytest.raises(ValueError, match="status"):
        summarize(records, method="dpfl", wall_time_s=0.0, status="paused")


def test_the_winning_candidates_are_counted_over_benign_clients() -> None:
    rows = [
        _row(0, 0, 0.5, best_candidate="aggregate"),
        _row(1, 0, 0.6, best_candidate="local"),
        _row(1, 1, 0.7, best_candidate="aggregate"),
        _row(1, 2, 0.8, best_candidate="aggregate"),
        _row(1, 3, 0.1, best_candidate="local", malicious=True),
    ]
    summary = summarize(_records(rows), method="dpfl", wall_time_s=0.0)
    assert summary["best_candidate_clients"] == {"local": 1, "aggregate": 2}
    plain = summarize(_records([_row(0, 0, 0.5)]), method="fedavg", wall_time_s=0.0)
    assert "best_candidate_clients" not in plain


def test_rounds_by_participants_counts_each_round_once_and_empty_rounds_as_zero() -> None:
    rows = [_row(0, c, 0.5) for c in range(3)] + [_row(1, 0, 0.6), _row(1, 2, 0.6)]
    rows += [_row(3, 1, 0.7)]  # nobody reported round 2
    summary = summarize(_records(rows), method="dpfl", wall_time_s=0.0, num_clients=3)
    assert summary["rounds_by_participants"] == {"3": 1, "2": 1, "1": 1, "0": 1}
