"""`collabfl admin metrics | payments | coalitions | events`: what a run recorded round by
round: the clients' metrics, iPFL's market ledger, the coalitions and how they changed, and
the run's (or the federation's) faults and notices.

The coalition changes come from `engine.report.coalition_moves`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from statistics import fmean
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from collabfl.cli.admin import tables
from collabfl.cli.admin.connection import EXIT_REFUSED, admin_app, coordinator_client, fail
from collabfl.cli.admin.tables import MISSING, AsJson, clock, number, optional, percent, print_json
from collabfl.engine.report.coalition_moves import (
    coalition_moves,
    coalitions_document,
    describe_moves,
    join_clients,
)
from collabfl.engine.report.table import human_bytes


@admin_app.command()
def metrics(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    as_json: AsJson = False,
) -> None:
    """Per round: test accuracy across clients of two models, labelled (each client's current
    model, and its best-validation model, which the report uses), and peer bytes downloaded."""
    with coordinator_client(ctx) as client:
        history = client.get_metrics(run_id)
    if as_json:  # JSON object keys are strings: rounds and client ids print as "0", "1", ...
        print_json({"run_id": run_id, "rounds": history})
        return
    console = tables.console
    if not history:
        console.print(f"run {run_id} has no recorded round yet")
        return
    table = Table(
        "round", "clients", "current model: mean acc (min–max)", "best-validation model: mean acc",
        "peer bytes",
    )  # fmt: skip
    for round_index, by_client in history.items():
        fetched = sum(number(m.get("bytes_fetched")) or 0 for m in by_client.values())
        current = _accuracies(by_client, "test_acc")
        best = _accuracies(by_client, "best_test_acc")
        table.add_row(
            str(round_index),
            str(len(by_client)),
            f"{percent(fmean(current))} ({percent(min(current))}–{percent(max(current))})"
            if current
            else MISSING,
            percent(fmean(best)) if best else MISSING,
            human_bytes(fetched),
        )
    console.print(table)
    console.print(
        "current model: each client's model as evaluated in that round (test_acc). "
        "best-validation model: each client's model with the best validation accuracy so far "
        "(best_test_acc); the report (summary.json, results.md) uses this one: its mean over "
        "benign clients of their last reports.",
        highlight=False,
    )


def _accuracies(by_client: Mapping[int, Mapping[str, Any]], key: str) -> list[float]:
    values = (number(m.get(key)) for m in by_client.values())
    return [v for v in values if v is not None]


@admin_app.command()
def payments(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    round_index: Annotated[
        int | None, typer.Option("--round", help="one round only (default: the last)")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """iPFL's ledger: per client gain, sharing cost, payment and utility, with totals."""
    with coordinator_client(ctx) as client:
        history = client.get_metrics(run_id)
    ledger = {
        t: m for t, m in history.items() if any(v.get("utility") is not None for v in m.values())
    }
    if not ledger:
        fail(f"run {run_id} has no market ledger (is it an iPFL run with a round done?)", 2)
    shown = max(ledger) if round_index is None else round_index
    if shown not in ledger:
        fail(f"run {run_id} has no ledger for round {shown}", 2)
    if as_json:  # every round up to the one shown: the cumulative totals follow from them
        print_json(
            {
                "run_id": run_id,
                "round": shown,
                "rounds": {t: ledger[t] for t in ledger if t <= shown},
            }
        )
        return
    table = Table(
        "client", "gain", "sharing cost", "payment", "utility", "importers",
        f"cumulative utility (rounds 0–{shown})", "cumulative payment",
        title=f"run {run_id}, round {shown}",
    )  # fmt: skip
    for client_id, entry in sorted(ledger[shown].items()):
        rounds = [ledger[t][client_id] for t in ledger if t <= shown and client_id in ledger[t]]
        table.add_row(
            str(client_id),
            *(f"{entry[key]:.3f}" for key in ("gain", "sharing_cost", "payment", "utility")),
            str(entry.get("importers", 0)),
            f"{sum(r['utility'] for r in rounds):.3f}",
            f"{sum(r['payment'] for r in rounds):.3f}",
        )
    tables.console.print(table)


@admin_app.command()
def coalitions(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    round_index: Annotated[
        int | None,
        typer.Option("--round", help="default: the last round that recorded coalitions"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """FedCollab / collaboration equilibrium coalitions of a round, and what changed since."""
    with coordinator_client(ctx) as client:
        history = client.get_coalitions(run_id)
        if round_index is not None and round_index not in history:
            client.get_coalitions(run_id, round_index)  # refused if the round was never recorded
            fail(f"run {run_id} recorded no coalitions in round {round_index}", EXIT_REFUSED)
    if not history:
        fail(
            f"run {run_id} has no coalitions (is it a coalition method with a round done?)",
            EXIT_REFUSED,
        )
    shown = max(history) if round_index is None else round_index
    previous = max((t for t in history if t < shown), default=None)
    moves = [] if previous is None else coalition_moves(history[previous], history[shown])
    if as_json:
        typer.echo(json.dumps(coalitions_document(run_id, shown, history, previous, moves)))
        return
    console = tables.console
    clients = sum(len(members) for members in history[shown])
    console.print(
        f"run {run_id}, round {shown}: {len(history[shown])} coalitions, {clients} clients",
        highlight=False,
    )
    table = Table("coalition", "size", "members")
    for index, members in enumerate(history[shown]):
        table.add_row(str(index), str(len(members)), join_clients(members))
    console.print(table)
    if previous is not None:
        changes = "; ".join(describe_moves(moves)) or "none"
        console.print(f"changes since round {previous}: {changes}", highlight=False)


@admin_app.command()
def events(
    ctx: typer.Context,
    run_id: Annotated[str | None, typer.Argument(metavar="[RUN]")] = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all",
            help="every run's events and the federation's own (joins, refused joins, "
            "invitations, revocations, impostors)",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """The run's recorded faults and notices, oldest first; `--all`: the whole federation's."""
    if (run_id is None) != every:
        raise typer.BadParameter("give a RUN or --all, not both")
    with coordinator_client(ctx) as client:
        recorded = client.list_events(run_id or "")
    if as_json:
        print_json(recorded)
        return
    console = tables.console
    if not recorded:
        console.print("no events" if every else f"run {run_id} has no events")
        return
    colours = {"info": "", "warning": "yellow", "error": "red"}
    headers = ["id", "time", *(["run"] if every else []), "round", "level", "kind", "client"]
    table = Table(*headers, "message")
    rows = []
    for event in recorded:
        level = event.level
        cells: list[tables.Cell] = [
            str(event.event_id),
            clock(event.time),
            *([event.run_id or MISSING] if every else []),
            optional(event.round),
            Text(level, style=colours[level]),
            event.kind,
            optional(event.client_id),
            event.message,  # a participant's words may reach it: printed as written
        ]
        table.add_row(*cells)
        rows.append(cells)
    tables.print_table(console, table, rows, lead=len(headers))
