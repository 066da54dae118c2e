"""What `collabfl admin` prints: the console, JSON documents, the shared tables (runs) and
the cell formats; tables that stay readable in a narrow terminal.

Rich fits a wide table to the terminal by folding every cell, so at 80 columns a member's
host, peer address and dates came out a few letters per line. When a table's natural width
does not fit, its rows print as records instead: the row's first cells on one line, then one
indented `column: value` line per other cell, wrapped at words within the terminal.

The commands print through ``tables.console``, looked up when they print, so a test can put
a console of a fixed width in its place.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from collabfl.engine.report.console import plain_console
from collabfl.kernel.printable import shown

if TYPE_CHECKING:
    from collabfl.coordinator.store.records import Run

console = plain_console()

AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]

RECORD_INDENT = 2
MISSING = "—"
"""What an empty cell shows."""
UNBOUNDED = 1_000_000
"""Room to measure a table in without folding anything."""


def print_json(document: object) -> None:
    """One JSON document on stdout; members, runs and events as objects of their fields."""
    typer.echo(json.dumps(document, default=_fields))


def _fields(value: object) -> dict[str, Any]:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


Cell = str | Text
"""A table cell: text printed as written, or a ``Text`` styled by us (a status word)."""


def print_table(console: Console, table: Table, rows: Sequence[Sequence[Cell]], lead: int) -> None:
    """``table`` (holding ``rows``) when it fits the terminal unfolded, else each row as a
    record led by its first ``lead`` cells."""
    natural = Measurement.get(console, console.options.update_width(UNBOUNDED), table)
    if natural.maximum <= console.width:
        console.print(table)
        return
    headers = [str(column.header) for column in table.columns]
    for row in rows:
        console.print(Text("  ").join(_lead(headers[:lead], row[:lead])), highlight=False)
        for header, cell in zip(headers[lead:], row[lead:], strict=True):
            line = Text.assemble(f"{header}: ", _text(cell))
            console.print(Padding(line, (0, 0, 0, RECORD_INDENT), expand=False), highlight=False)


def _text(cell: Cell) -> Text:
    """``cell`` as Text; a string shown as written (``Text`` skips the console's check)."""
    return cell if isinstance(cell, Text) else Text(shown(cell))


def _lead(headers: Sequence[str], cells: Sequence[Cell]) -> list[Text]:
    """A record's first line: its cells, a number named by its column ("round 3"), an
    empty cell left out."""
    lead = []
    for header, cell in zip(headers, cells, strict=True):
        plain = cell.plain if isinstance(cell, Text) else cell
        if plain in ("", MISSING):
            continue
        lead.append(Text.assemble(f"{header} ", _text(cell)) if plain.isdigit() else _text(cell))
    return lead


def runs_table(runs: list[Run], flower_runs: Mapping[str, int | None] | None = None) -> Table:
    """The runs; with `flower_runs` (our run id -> Flower run id) a column for those too.

    Every command takes a run id, so ids are never cut short: their column does not wrap,
    and only when even that cannot fit does it fold onto a second line (no ellipsis).
    """
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run", no_wrap=True, overflow="fold")
    table.add_column("method", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("last round")
    table.add_column("created", no_wrap=True, overflow="fold")
    if flower_runs is not None:
        table.add_column("Flower run")
    for run in runs:
        cells = [
            run.run_id,
            run.method,
            run.status,
            optional(run.last_completed_round),
            datetime.fromtimestamp(run.created_at).strftime("%Y-%m-%d %H:%M"),
        ]
        if flower_runs is not None:
            cells.append(optional(flower_runs.get(run.run_id)))
        table.add_row(*cells)
    return table


def print_runs(runs: list[Run], flower_runs: Mapping[str, int | None] | None = None) -> None:
    """The runs table, then each run's message on a line of its own (a status line such
    as "waiting for clients: 3/4 joined, 87 s left" needs the room a cell lacks)."""
    console.print(runs_table(runs, flower_runs))
    for run in runs:
        if run.message:
            console.print(f"{run.run_id}: {run.message}", highlight=False, soft_wrap=True)


def number(value: Any) -> float | None:
    """A finite metric value, or None for a missing, non-numeric or NaN one."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if is_number and math.isfinite(value) else None


def percent(value: float) -> str:
    return f"{value * 100:.2f}%"


def optional(value: int | None) -> str:
    return MISSING if value is None else str(value)


def when(timestamp: float, never: str) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else never


def until(timestamp: float) -> str:
    """A certificate's expiry: its date, or that it has expired."""
    if not timestamp:
        return MISSING
    day = datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d")
    return f"expired {day}" if timestamp < time.time() else day


def clock(timestamp: float) -> str:
    """A moment to the second."""
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"
