"""Plots write real PNGs; the results table renders in rich and markdown."""

from pathlib import Path

from rich.console import Console

from collabfl.engine.report.graph_stats import adjacency
from collabfl.engine.report.plots import (
    plot_accuracy_by_round,
    plot_accuracy_vs_variance,
    plot_adjacency_heatmaps,
)
from collabfl.engine.report.run_dir import RunRecords
from collabfl.engine.report.table import (
    human_bytes,
    print_results,
    results_markdown,
    results_table,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _records(graph_rounds: list[int]) -> RunRecords:
    rows = [
        {
            "round": r,
            "client": c,
            "test_acc": 0.1 * r + 0.05 * c,
            "best_test_acc": 0.1 * r + 0.05 * c if r else None,
            "bytes_fetched": 10,
            "peak_peer_models": 1,
            "malicious": c == 2,
        }
        for r in range(5)
        for c in range(3)
    ]
    graphs = {r: adjacency(3, [(0, 1, 0.2 * (r + 1)), (1, 0, 0.5)]) for r in graph_rounds}
    return RunRecords(config={}, rows=rows, graphs=graphs, summary=None)


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 1000


SUMMARIES = [
    {
        "method": "dpfl",
        "mean_test_acc": 0.8123,
        "std_test_acc": 0.0456,
        "var_test_acc": 0.0456**2,
        "bytes_fetched_per_client_round": 3.5 * 1024**2,
        "peak_peer_models": 4,
        "graph_sparsity_last": 0.625,
        "graph_symmetry_last": 0.875,
        "wall_time_s": 42.04,
    },
    {
        "method": "local|only",
        "mean_test_acc": 0.7,
        "std_test_acc": 0.1,
        "var_test_acc": 0.01,
        "bytes_fetched_per_client_round": 0.0,
        "peak_peer_models": 0,
        "graph_sparsity_last": None,
        "graph_symmetry_last": None,
        "wall_time_s": 3.0,
    },
]


def test_accuracy_by_round(tmp_path: Path) -> None:
    path = plot_accuracy_by_round(
        {"dpfl": _records([0]), "fedavg": _records([])}, tmp_path / "plots" / "acc.png"
    )
    assert path == tmp_path / "plots" / "acc.png"
    _assert_png(path)


def test_accuracy_vs_variance(tmp_path: Path) -> None:
    _assert_png(plot_accuracy_vs_variance(SUMMARIES, tmp_path / "scatter.png"))


def test_heatmaps(tmp_path: Path) -> None:
    _assert_png(plot_adjacency_heatmaps(_records([0, 1, 2, 3]), tmp_path / "graphs.png"))
    _assert_png(plot_adjacency_heatmaps(_records([7]), tmp_path / "one.png"))


def test_heatmaps_without_graph_write_nothing(tmp_path: Path) -> None:
    assert plot_adjacency_heatmaps(_records([]), tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_human_bytes() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3.5 * 1024**2) == "3.5 MiB"
    assert human_bytes(2 * 1024**5) == "2048.0 TiB"


def test_rich_table_renders() -> None:
    console = Console(record=True, width=160)
    print_results(SUMMARIES, console=console)
    text = console.export_text()
    for expected in ("dpfl", "local|only", "81.23 ± 4.56", "20.79", "3.5 MiB", "62.5%", "42.0"):
        assert expected in text
    assert results_table(SUMMARIES).row_count == 2


def test_markdown_table() -> None:
    lines = results_markdown(SUMMARIES).splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("| Method | Test acc (%) |")
    assert lines[1] == "|:---|" + "---:|" * 8
    assert lines[2].startswith("| dpfl | 81.23 ± 4.56 | 20.79 | 3.5 MiB | — | 4 | 62.5% | 87.5% |")
    assert lines[3].startswith(r"| local\|only | 70.00 ± 10.00 | 100.00 | 0 B | — | 0 | — | — |")


def test_the_table_says_when_a_run_did_not_finish_or_misses_clients() -> None:
    cut_short = {**SUMMARIES[0], "status": "interrupted", "rounds": 3, "rounds_planned": 20}
    partial = {**SUMMARIES[1], "status": "finished", "clients_reported": "2/3"}
    complete = {**SUMMARIES[0], "status": "finished", "clients_reported": "3/3"}
    lines = results_markdown([cut_short, partial, complete]).splitlines()
    assert lines[2].startswith("| dpfl (interrupted after 3/20 rounds) |")
    assert lines[3].startswith(r"| local\|only (2/3 clients) |")
    assert lines[4].startswith("| dpfl |")


def test_the_table_says_how_many_rounds_had_how_many_clients() -> None:
    short = {**SUMMARIES[0], "num_clients": 4, "rounds_by_participants": {"4": 3, "1": 2}}
    whole = {**SUMMARIES[1], "num_clients": 4, "rounds_by_participants": {"4": 5}}
    console = Console(record=True, width=160)
    print_results([short, whole], console=console)
    notes = [line for line in console.export_text().splitlines() if "participants:" in line]
    assert notes == ["participants: dpfl: rounds by clients reporting: 3 with 4, 2 with 1"]
