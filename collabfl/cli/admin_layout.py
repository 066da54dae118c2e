"""Tables for `collabfl admin` that stay readable in a narrow terminal.

Rich fits a wide table to the terminal by folding every cell, so at 80 columns a member's
host, peer address and dates came out a few letters per line. When a table's natural width
does not fit, its rows print as records instead: the row's first cells on one line, then one
indented `column: value` line per other cell, wrapped at words within the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table

RECORD_INDENT = 2
MISSING = "—"
"""What an empty cell shows (``admin._MISSING``)."""
UNBOUNDED = 1_000_000
"""Room to measure a table in without folding anything."""


def print_table(console: Console, table: Table, rows: Sequence[Sequence[str]], lead: int) -> None:
    """``table`` (holding ``rows``) when it fits the terminal unfolded, else each row as a
    record led by its first ``lead`` cells."""
    natural = Measurement.get(console, console.options.update_width(UNBOUNDED), table)
    if natural.maximum <= console.width:
        console.print(table)
        return
    headers = [str(column.header) for column in table.columns]
    for row in rows:
        console.print("  ".join(_lead(headers[:lead], row[:lead])), highlight=False)
        for header, cell in zip(headers[lead:], row[lead:], strict=True):
            line = Padding(f"{header}: {cell}", (0, 0, 0, RECORD_INDENT), expand=False)
            console.print(line, highlight=False)


def _lead(headers: Sequence[str], cells: Sequence[str]) -> list[str]:
    """A record's first line: its cells, a number named by its column ("round 3"), an
    empty cell left out."""
    return [
        f"{header} {cell}" if cell.isdigit() else cell
        for header, cell in zip(headers, cells, strict=True)
        if cell not in ("", MISSING)
    ]
