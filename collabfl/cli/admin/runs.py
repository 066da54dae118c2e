"""`collabfl admin runs | start | stop`: the coordinator's runs, and starting and stopping
one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from collabfl.cli.admin import tables
from collabfl.cli.admin.connection import EXIT_REFUSED, admin_app, coordinator_client, fail
from collabfl.cli.admin.tables import AsJson, print_json, print_runs
from collabfl.engine.config import ConfigError, load_config
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.run_options import RunOptions
from collabfl.kernel.validation import problems

if TYPE_CHECKING:
    from collabfl.coordinator.service_client import CoordinatorClient

LAUNCH_GRACE_S = 120.0
"""How long `start --wait` allows, beyond the join timeout, for the ServerApp to start."""


@admin_app.command()
def runs(ctx: typer.Context, as_json: AsJson = False) -> None:
    """Every run, oldest first."""
    with coordinator_client(ctx) as client:
        all_runs = client.list_runs()
    if as_json:
        print_json(all_runs)
        return
    if not all_runs:
        tables.console.print("no runs")
        return
    print_runs(all_runs)


@admin_app.command()
def start(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Argument(help="TOML config (default: built-in)")] = None,
    clients: Annotated[int, typer.Option(min=1, help="clients the run waits for")] = 1,
    method: Annotated[str | None, typer.Option(help="method spec (default: `method`)")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="override a config value (repeatable)")
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="default: label-timestamp")] = None,
    out: Annotated[
        str,
        typer.Option(help="run directory, inside the coordinator's --runs-dir (relative: to it)"),
    ] = "",
    message_timeout: Annotated[
        float, typer.Option(help="seconds a client may take")
    ] = RunOptions().message_timeout_s,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="replace the earlier run held by --out")
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="print the run's status line as it changes until its clients joined"
        ),
    ] = False,
) -> None:
    """Start a run: the coordinator launches its ServerApp and the clients join."""
    from collabfl.engine.recording import safe_name  # its module loads torch

    try:
        settings = load_config(config, overrides)
        spec = parse_method_spec(method or settings.method, settings)
    except ConfigError as error:
        fail(error, EXIT_REFUSED)
    run_id = run_id or f"{safe_name(spec.label)}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        options = RunOptions(
            expected_clients=clients, out_dir=out, message_timeout_s=message_timeout
        )
    except ValidationError as error:
        fail("; ".join(problems(error)), EXIT_REFUSED)
    request = run_request(spec, options)
    console = tables.console
    if clients != settings.data.num_clients:
        console.print(
            f"note: a federation's clients bring their own data: the run's records name the "
            f"clients that join (--clients {clients}) and their data files, not the config's "
            f"data.num_clients ({settings.data.num_clients}) and partition",
            highlight=False,
        )
    with coordinator_client(ctx) as client:
        run = client.create_run(run_id, spec.label, request, overwrite)
        console.print(f"run {run.run_id} ({spec.label}): {run.status}", highlight=False)
        for event in client.list_events(run.run_id):
            if event.kind == "undeclared_sizes":
                console.print(f"warning: {event.message}", highlight=False)
        console.print(
            f"follow it: collabfl admin runs (its status line), collabfl admin events "
            f"{run.run_id}, collabfl admin metrics {run.run_id}",
            highlight=False,
        )
        if wait:
            _follow_join(client, run.run_id, options.join_timeout_s + LAUNCH_GRACE_S)


def _follow_join(client: CoordinatorClient, run_id: str, limit_s: float) -> None:
    """Print the run's status line as it changes until it no longer says the run is waiting
    for clients (they joined, or the join timeout ran out), or the run ended."""
    shown = ""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if run.message and run.message != shown:
            tables.console.print(f"{run_id}: {run.message}", highlight=False)
            shown = run.message
        if not run.active:
            tables.console.print(f"run {run_id}: {run.status}", highlight=False)
            return
        if shown and not shown.startswith("waiting for clients"):
            return
        time.sleep(1.0)
    tables.console.print(
        f"run {run_id}: no word from its ServerApp in {limit_s:g} s; see collabfl admin "
        f"events {run_id} and the coordinator's log",
        highlight=False,
    )


@admin_app.command()
def stop(ctx: typer.Context, run_id: Annotated[str, typer.Argument(metavar="RUN")]) -> None:
    """Ask a run to stop; the ServerApp ends it cleanly after the current round."""
    with coordinator_client(ctx) as client:
        run = client.stop_run(run_id)
    tables.console.print(f"run {run.run_id}: stop requested (status {run.status})", highlight=False)
