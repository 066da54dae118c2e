"""The results table comparing methods, for the terminal (rich) and for docs (markdown).

Both renderings share one set of formatted cells, so the README and the terminal never
disagree. Accuracy is in percent and variance in %², the units papers in this area report.
"""

from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = (
    "Method",
    "Test acc (%)",
    "Variance (%²)",
    "Peer bytes/client/round",
    "Coordinator bytes/client/round",
    "Peak peers",
    "Sparsity",
    "Symmetry",
    "Time (s)",
)
_MISSING = "—"


def human_bytes(count: float) -> str:
    """Binary units (KiB, MiB, ...), one decimal above bytes."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    exponent = 0
    while abs(count) >= 1024 and exponent < len(units) - 1:
        count /= 1024
        exponent += 1
    return f"{count:.0f} B" if exponent == 0 else f"{count:.1f} {units[exponent]}"


def _percent(value: float | None) -> str:
    return _MISSING if value is None else f"{value * 100:.1f}%"


def method_label(summary: dict[str, Any]) -> str:
    """The method, with what a reader must know before trusting its numbers: a run that did
    not finish (and after how many rounds), and a mean over fewer clients than the federation.
    """
    notes = []
    status = summary.get("status", "finished")
    if status != "finished":
        planned = summary.get("rounds_planned")
        done = summary.get("rounds")
        notes.append(f"{status} after {done}/{planned} rounds" if planned else status)
    reported = summary.get("clients_reported")
    if reported is not None:
        got, expected = (int(n) for n in str(reported).split("/"))
        if got < expected:
            notes.append(f"{reported} clients")
    label = str(summary["method"])
    return f"{label} ({'; '.join(notes)})" if notes else label


def _row(summary: dict[str, Any]) -> list[str]:
    mean, std, var = (summary.get(k) for k in ("mean_test_acc", "std_test_acc", "var_test_acc"))
    bytes_per = summary.get("bytes_fetched_per_client_round")
    coordinator_per = summary.get("coordinator_bytes_per_client_round")
    peak = summary.get("peak_peer_models")
    time_s = summary.get("wall_time_s")
    return [
        method_label(summary),
        _MISSING if mean is None or std is None else f"{mean * 100:.2f} ± {std * 100:.2f}",
        _MISSING if var is None else f"{var * 100**2:.2f}",
        _MISSING if bytes_per is None else human_bytes(bytes_per),
        _MISSING if coordinator_per is None else human_bytes(coordinator_per),
        _MISSING if peak is None else str(peak),
        _percent(summary.get("graph_sparsity_last")),
        _percent(summary.get("graph_symmetry_last")),
        _MISSING if time_s is None else f"{time_s:.1f}",
    ]


def results_table(summaries: list[dict[str, Any]]) -> Table:
    """One row per method; graph columns show the last round's graph."""
    table = Table(title="Results (benign clients, best-validation models)")
    for index, name in enumerate(COLUMNS):
        table.add_column(name, justify="left" if index == 0 else "right")
    for summary in summaries:
        table.add_row(*_row(summary))
    return table


def print_results(summaries: list[dict[str, Any]], console: Console | None = None) -> None:
    """Print the results table to `console` (a fresh stdout console by default)."""
    (console or Console()).print(results_table(summaries))


def results_markdown(summaries: list[dict[str, Any]]) -> str:
    """The same table as GitHub markdown, for README and benchmark pages."""
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(COLUMNS) - 1)) + "|",
    ]
    for summary in summaries:
        cells = [cell.replace("|", r"\|") for cell in _row(summary)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
