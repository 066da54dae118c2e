"""The results table comparing methods, for the terminal (rich) and for docs (markdown).

Both renderings share one set of formatted cells, so the README and the terminal never
disagree. Accuracy is in percent and variance in %², the units papers in this area report.
"""

from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from collabfl.engine.report.console import plain_console

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
        if "fine_tune_round" in summary:
            notes.append(f"{status} after {planned}/{planned} rounds and fine-tuning")
        else:
            notes.append(f"{status} after {done}/{planned} rounds" if planned else status)
    seeds = summary.get("seeds_finished")
    if seeds is not None:
        finished, planned = (int(n) for n in str(seeds).split("/"))
        if finished < planned:
            notes.append(f"{seeds} seeds")
    failures = summary.get("step_failures")
    if failures and status != "failed":
        count = int(failures["count"])
        notes.append(f"{count} failed client step{'s' if count > 1 else ''}")
    reported = summary.get("clients_reported")
    if reported is not None:
        got, expected = (int(n) for n in str(reported).split("/"))
        if got < expected:
            notes.append(f"{reported} clients")
    label = str(summary["method"])
    return f"{label} ({'; '.join(notes)})" if notes else label


def _accuracy_cell(summary: dict[str, Any]) -> str:
    """Mean ± std: over clients for one run, over seeds for a multi-seed aggregate."""
    mean = summary.get("mean_test_acc")
    std = summary.get("seed_std_test_acc" if "seeds" in summary else "std_test_acc")
    if mean is None:
        return _MISSING
    return f"{mean * 100:.2f} ± {_MISSING if std is None else f'{std * 100:.2f}'}"


def _row(summary: dict[str, Any]) -> list[str]:
    var = summary.get("var_test_acc")
    bytes_per = summary.get("bytes_fetched_per_client_round")
    coordinator_per = summary.get("coordinator_bytes_per_client_round")
    peak = summary.get("peak_peer_models")
    time_s = summary.get("wall_time_s")
    return [
        method_label(summary),
        _accuracy_cell(summary),
        _MISSING if var is None else f"{var * 100**2:.2f}",
        _MISSING if bytes_per is None else human_bytes(bytes_per),
        _MISSING if coordinator_per is None else human_bytes(coordinator_per),
        _MISSING if peak is None else str(peak),
        _percent(summary.get("graph_sparsity_last")),
        _percent(summary.get("graph_symmetry_last")),
        _MISSING if time_s is None else f"{time_s:.1f}",
    ]


def table_title(summaries: list[dict[str, Any]]) -> str:
    """What the numbers are: over clients, or over seeds for multi-seed aggregates."""
    seeds = max((len(s.get("seeds", [])) for s in summaries), default=0)
    spread = (
        f"mean ± std over {seeds} seeds (sample std, ddof=1)"
        if seeds
        else "mean ± std over clients (population std, ddof=0)"
    )
    return f"Results (benign clients, best-validation models; {spread})"


def results_caption(summaries: list[dict[str, Any]], setting: str, seed: object = None) -> str:
    """results.md's first line: what the numbers are, the setting and, for one seed, which."""
    multi_seed = any("seeds" in s for s in summaries)
    which = "" if multi_seed or seed is None else f", seed {seed}"
    return f"{table_title(summaries)}. Setting: {setting}{which}.{partial_note(summaries)}"


def partial_note(summaries: list[dict[str, Any]]) -> str:
    """The caption's warning when the comparison was cut short: which methods did not
    finish (every seed, for an aggregate), so the table is not read as the whole result."""
    cut = [str(s["method"]) for s in summaries if s.get("status") == "interrupted"]
    return f" Partial: {', '.join(cut)} did not finish (interrupted)." if cut else ""


def results_table(summaries: list[dict[str, Any]], columns: tuple[int, ...] = ()) -> Table:
    """One row per method with the columns at ``columns`` (default: all, else starting with
    the method); graph columns show the last round's graph. A label wraps, never cut short;
    a table without the accuracy column names the bare method (its notes are beside it)."""
    chosen = columns or tuple(range(len(COLUMNS)))
    table = Table(title=table_title(summaries))
    rows = [_row(summary) for summary in summaries]
    if 1 not in chosen:
        for cells, summary in zip(rows, summaries, strict=True):
            cells[0] = str(summary["method"])
    for index in chosen:
        header = NARROW_HEADERS.get(COLUMNS[index], COLUMNS[index]) if columns else COLUMNS[index]
        table.add_column(
            header,
            justify="left" if index == 0 else "right",
            overflow="fold",
            max_width=_narrow_width(header, [r[index] for r in rows]) if columns else None,
        )
    for cells in rows:
        table.add_row(*(cells[i] for i in chosen))
    return table


def _narrow_width(header: str, cells: list[str]) -> int | None:
    """A narrow table's number column is as wide as its widest cell or header word (the
    header wraps), leaving the room to method labels; the method column takes the rest."""
    if header == COLUMNS[0]:
        return None
    return max([len(word) for word in header.split()] + [len(cell) for cell in cells])


NARROW_GROUPS = ((0, 1, 2, 5, 8), (0, 3, 4, 6, 7))
"""Columns of the two tables a narrow terminal gets instead of one wide table: accuracy, peak
peers and time, then traffic and graphs."""
NARROW_HEADERS = {
    "Peer bytes/client/round": "Peer bytes",
    "Coordinator bytes/client/round": "Coordinator bytes",
}
NARROW_CAPTION = "Peer and coordinator bytes: model bytes per client per round."


def print_results(summaries: list[dict[str, Any]], console: Console | None = None) -> None:
    """Print the results to `console` (a fresh stdout console by default): one table when it
    fits the terminal's width, else two narrower ones, so no header or label is cut short."""
    console = console or plain_console()
    wide = results_table(summaries)
    natural = Measurement.get(console, console.options.update(max_width=10**6), wide)
    if natural.maximum <= console.width:
        console.print(wide)
    else:
        for group in NARROW_GROUPS:
            table = results_table(summaries, group)
            if 3 in group:
                table.title = "Traffic and collaboration graphs (last round)"
                table.caption = NARROW_CAPTION
            console.print(table)
    for note in failure_notes(summaries):
        console.print(f"failed: {note}", highlight=False, markup=False, soft_wrap=True)
    for note in participation_notes(summaries):
        console.print(f"participants: {note}", highlight=False, markup=False, soft_wrap=True)


def results_markdown(summaries: list[dict[str, Any]]) -> str:
    """The same table as GitHub markdown, for README and benchmark pages."""
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(COLUMNS) - 1)) + "|",
    ]
    for summary in summaries:
        cells = [cell.replace("|", r"\|") for cell in _row(summary)]
        lines.append("| " + " | ".join(cells) + " |")
    said = failure_notes(summaries)
    if said:
        lines += ["", "Failed steps (the rounds and clients they name lack those steps):", ""]
        lines += [f"- {note}" for note in said]
    return "\n".join(lines) + "\n"


def participation_notes(summaries: list[dict[str, Any]]) -> list[str]:
    """For each method with a round that fewer than all its clients reported, how many
    rounds had how many participants ("dpfl: 18 rounds with 4 clients, 2 with 3")."""
    notes = []
    for summary in summaries:
        histogram = summary.get("rounds_by_participants") or {}
        everyone = str(summary.get("num_clients"))
        if set(histogram) - {everyone}:
            counts = [f"{rounds} with {clients}" for clients, rounds in histogram.items()]
            notes.append(f"{summary['method']}: rounds by clients reporting: {', '.join(counts)}")
    return notes


def failure_notes(summaries: list[dict[str, Any]]) -> list[str]:
    """Every method's sentences on the steps that failed on clients, in table order."""
    return [
        str(note)
        for summary in summaries
        for note in (summary.get("step_failures") or {}).get("notes", [])
    ]
