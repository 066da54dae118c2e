"""`collabfl admin graph | export`: a run's collaboration graphs, one round's as a table (and
heatmap), the whole history as a file.

The documents `export` writes come from `cli/graph_history.py`: JSON, or GraphML as one
multigraph with edges by round. numpy, matplotlib and networkx load in the command that
needs them, not at start-up.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from collabfl.cli.admin import tables
from collabfl.cli.admin.connection import EXIT_REFUSED, admin_app, coordinator_client, fail
from collabfl.cli.admin.tables import AsJson, print_json
from collabfl.kernel.atomic import write_text

if TYPE_CHECKING:
    import numpy as np

DENSE_LIMIT = 16
"""Up to this many clients a graph prints as a matrix; beyond, as an edge list."""


class ExportFormat(StrEnum):
    json = "json"
    graphml = "graphml"


@admin_app.command()
def graph(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    round_index: Annotated[
        int | None, typer.Argument(metavar="[ROUND]", help="default: the last completed round")
    ] = None,
    png: Annotated[Path | None, typer.Option(help="also write an adjacency heatmap here")] = None,
    as_json: AsJson = False,
) -> None:
    """One round's collaboration graph: row i lists the weights client i puts on peers."""
    from collabfl.engine.report.graph_stats import (  # numpy
        adjacency,
        mean_out_degree,
        sparsity,
        symmetry,
    )

    with coordinator_client(ctx) as client:
        if round_index is None:
            round_index = client.get_run(run_id).last_completed_round
            if round_index is None:
                fail(f"run {run_id} has no recorded round yet", EXIT_REFUSED)
        record = client.get_round(run_id, round_index)
    matrix = adjacency(record.num_clients, record.edges)
    heatmap = None
    if png is not None:
        from collabfl.engine.report.plots import plot_adjacency_heatmaps  # matplotlib
        from collabfl.engine.report.run_dir import RunRecords

        records = RunRecords(config={}, rows=[], graphs={round_index: matrix}, summary=None)
        heatmap = plot_adjacency_heatmaps(records, png)
    stats = {
        "sparsity": sparsity(matrix),
        "symmetry": symmetry(matrix),
        "mean_out_degree": mean_out_degree(matrix),
    }
    if as_json:  # edges as [i, j, weight]: client i puts weight on peer j
        document = {"run_id": run_id, "round": round_index, "num_clients": record.num_clients}
        edges = {"edges": record.edges, "png": None if heatmap is None else str(heatmap)}
        print_json({**document, **stats, **edges})
        return
    console = tables.console
    console.print(
        f"run {run_id}, round {round_index}: {record.num_clients} clients, "
        f"{len(record.edges)} edges, sparsity {stats['sparsity']:.0%}, "
        f"symmetry {stats['symmetry']:.0%}, mean out-degree {stats['mean_out_degree']:.2f}",
        highlight=False,
    )
    if record.num_clients <= DENSE_LIMIT:
        console.print(_matrix_table(matrix))
    else:
        console.print(_edge_table(record.edges))
    if heatmap is not None:
        console.print(f"wrote {heatmap}", highlight=False)


@admin_app.command()
def export(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    out: Annotated[Path, typer.Option(help="file to write")],
    fmt: Annotated[
        ExportFormat, typer.Option("--format", help="json: rounds with edge lists; graphml")
    ] = ExportFormat.json,
) -> None:
    """The run's whole graph history as JSON or GraphML (one multigraph, edges by round)."""
    from collabfl.cli.graph_history import history_document, history_multigraph  # networkx

    with coordinator_client(ctx) as client:
        run = client.get_run(run_id)
        history = client.get_graph_history(run_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt is ExportFormat.json:
        write_text(out, json.dumps(history_document(run, history), indent=1) + "\n", shared=True)
    else:
        import networkx as nx

        nx.write_graphml(history_multigraph(run, history), out)
    tables.console.print(f"wrote {len(history)} rounds of run {run_id} to {out}", highlight=False)


def _matrix_table(matrix: np.ndarray) -> Table:
    table = Table("i \\ j", *(str(j) for j in range(matrix.shape[0])))
    for i, row in enumerate(matrix):
        table.add_row(str(i), *(f"{w:.2f}" if w else "·" for w in row))
    return table


def _edge_table(edges: list[tuple[int, int, float]]) -> Table:
    table = Table("client i", "uses peer j", "weight")
    for i, j, w in edges:
        table.add_row(str(i), str(j), f"{w:.4f}")
    return table
