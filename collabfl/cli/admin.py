"""`collabfl admin`: inspect and steer a running coordinator through its gRPC service.

Exit codes: 0 done, 2 the coordinator refused the request (unknown run, run already
ended, ...), 3 no coordinator answered. Either failure is one line on stderr.

The documents it prints or writes come from `engine.report`: `export` from
`graph_history` (JSON, or GraphML as one multigraph with edges by round) and the coalition
changes from `coalition_moves`.

Start-up stays fast (no torch, matplotlib, networkx): a command imports what only it needs
in its own body, and `tests/test_cli_startup.py` keeps it so.
"""

from __future__ import annotations

import ipaddress
import json
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from collabfl.cli.admin_layout import MISSING, print_table
from collabfl.engine.report.coalition_moves import (
    coalition_moves,
    coalitions_document,
    describe_moves,
    join_clients,
)
from collabfl.engine.report.table import human_bytes
from collabfl.engine.run_options import RunOptions
from collabfl.kernel import exit_status
from collabfl.kernel.atomic import write_text
from collabfl.kernel.validation import problems

if TYPE_CHECKING:
    import numpy as np

    from collabfl.coordinator.member_status import MemberStatus
    from collabfl.coordinator.operator_credential import OperatorCredential
    from collabfl.coordinator.records import Run
    from collabfl.coordinator.service_client import CoordinatorClient
    from collabfl.kernel.tls import ClientTLS

DEFAULT_COORDINATOR = "127.0.0.1:9300"
EXIT_REFUSED = exit_status.USAGE
EXIT_UNREACHABLE = exit_status.FAILURE
DENSE_LIMIT = 16
"""Up to this many clients a graph prints as a matrix; beyond, as an edge list."""

_MISSING = MISSING

admin_app = typer.Typer(
    help="Inspect and steer a running coordinator.",
    rich_markup_mode="markdown",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()

AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


class ExportFormat(StrEnum):
    json = "json"
    graphml = "graphml"


@dataclass(frozen=True)
class _Connection:
    address: str
    timeout_s: float
    tls: ClientTLS | None


@admin_app.callback()
def connect(
    ctx: typer.Context,
    coordinator: Annotated[
        str | None,
        typer.Option(
            "--coordinator",
            envvar="COLLABFL_COORDINATOR",
            metavar="HOST:PORT",
            help="address of the coordinator service (default: your credential's, else "
            f"{DEFAULT_COORDINATOR})",
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds to wait per request")] = 5.0,
    ca: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            envvar="COLLABFL_COORDINATOR_CA",
            help="the federation's CA (PEM): use TLS",
        ),
    ] = None,
    cert: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            envvar="COLLABFL_OPERATOR_CERT",
            help="your operator certificate (PEM)",
        ),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            envvar="COLLABFL_OPERATOR_KEY",
            help="your operator private key (PEM)",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            envvar="COLLABFL_INSECURE",
            help="plain gRPC to a coordinator started with --insecure (implied on loopback)",
        ),
    ] = False,
    credential: Annotated[
        Path | None,
        typer.Option(
            envvar="COLLABFL_CREDENTIAL",
            dir_okay=False,
            help="your operator credential (default: the one `collabfl admin login` saved)",
        ),
    ] = None,
) -> None:
    """Inspect and steer a running coordinator over mutual TLS, as the operator your
    credential (`collabfl admin login`, or --ca/--cert/--key) names; plain gRPC only with
    --insecure, or on loopback when you hold no credential."""
    if ctx.invoked_subcommand == "login":
        return  # login makes the credential the other commands use
    saved = _saved_credential(credential) if ca is None and not insecure else None
    if saved is not None:
        from collabfl.kernel.tls import ClientTLS

        saved_tls = ClientTLS(saved.ca, saved.cert, saved.key)
        ctx.obj = _Connection(coordinator or saved.coordinator, timeout, saved_tls)
        return
    coordinator = coordinator or DEFAULT_COORDINATOR
    if ca is not None:
        if insecure:
            raise typer.BadParameter("--insecure and --ca contradict each other")
        if cert is None or key is None:
            raise typer.BadParameter(
                "--ca needs --cert and --key: the coordinator admits only callers with a "
                "certificate naming their role (an operator's: `collabfl admin login` makes one)"
            )
        from collabfl.kernel.tls import ClientTLS  # loads gRPC: only when TLS is asked for

        tls = ClientTLS.from_files(ca, cert, key)
    elif cert is not None or key is not None:
        raise typer.BadParameter("--cert and --key need --ca: mutual TLS is TLS first")
    elif insecure or _is_loopback(coordinator):
        tls = None
    else:
        raise typer.BadParameter(
            f"{coordinator} is not on this machine: give --ca, --cert and --key (TLS), or "
            "--insecure for a coordinator started with --insecure"
        )
    ctx.obj = _Connection(coordinator, timeout, tls)


def _saved_credential(path: Path | None) -> OperatorCredential | None:
    """The credential at `path` (it must be one), else the saved default, if any."""
    from collabfl.coordinator.operator_credential import OperatorCredential, default_path

    if path is None and not default_path().exists():
        return None
    try:
        return OperatorCredential.load(path or default_path())
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


def _print_json(document: object) -> None:
    """One JSON document on stdout; members, runs and events as objects of their fields."""
    typer.echo(json.dumps(document, default=_fields))


def _fields(value: object) -> dict[str, Any]:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _is_loopback(address: str) -> bool:
    """Whether HOST:PORT names this machine (plain gRPC cannot leave it then)."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fail(message: object, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def _client(ctx: typer.Context) -> Iterator[CoordinatorClient]:
    """A client for the command; coordinator failures become one stderr line and an exit code."""
    # gRPC and the generated protocol load here, not at start-up (--help needs neither)
    from collabfl.coordinator.service_client import (
        CoordinatorClient,
        CoordinatorError,
        CoordinatorUnreachable,
    )

    connection: _Connection = ctx.obj
    try:
        with CoordinatorClient(connection.address, connection.timeout_s, connection.tls) as client:
            yield client
    except CoordinatorUnreachable as error:
        _fail(error, EXIT_UNREACHABLE)
    except CoordinatorError as error:
        _fail(error, EXIT_REFUSED)


@admin_app.command()
def status(
    ctx: typer.Context,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            envvar="COLLABFL_STATE_DIR",
            exists=True,
            file_okay=False,
            help="the coordinator's --state-dir, on its machine: also name each active run's "
            "Flower run id",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Uptime, database, members (client id, host, online, last seen, SuperNode registered,
    certificate expiry) and the active runs with their last round."""
    with _client(ctx) as client:
        state = client.status()
    flower_runs = None
    if state_dir is not None:
        from collabfl.coordinator.flower_status import flower_run_id

        flower_runs = {run.run_id: flower_run_id(state_dir, run) for run in state.active_runs}
    if as_json:
        extra = {} if flower_runs is None else {"flower_runs": flower_runs}
        _print_json({"coordinator": ctx.obj.address, **asdict(state), **extra})
        return
    console.print(
        f"coordinator {ctx.obj.address}: up {_duration(state.uptime_s)}, database {state.db_path}",
        highlight=False,
    )
    online = sum(m.presence == "online" for m in state.members)
    known = "" if state.supernodes_error else f" ({online} online)"
    console.print(
        f"{state.num_members} members{known}, {state.num_runs} runs, "
        f"{len(state.active_runs)} active",
        highlight=False,
    )
    _print_members(state.members, state.supernodes_error, state.unbound_nodes, detailed=False)
    if state.active_runs:
        _print_runs(state.active_runs, flower_runs)


@admin_app.command()
def members(ctx: typer.Context, as_json: AsJson = False) -> None:
    """The federation's members: client id, host, online, last seen, SuperNode registered,
    certificate expiry, Flower node and peer address."""
    with _client(ctx) as client:
        state = client.status()
    if as_json:
        _print_json(state.members)
        return
    _print_members(state.members, state.supernodes_error, state.unbound_nodes, detailed=True)


def _print_members(
    members: list[MemberStatus], error: str, unbound: list[int], detailed: bool
) -> None:
    """The members table, then why presence is unknown and which nodes belong to no one."""
    if members:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("client", no_wrap=True, overflow="fold")
        table.add_column("host", no_wrap=True, overflow="fold")
        for name in ("state", "last seen", "SuperNode", "certificate"):
            table.add_column(name, overflow="fold")
        if detailed:
            table.add_column("Flower node", overflow="fold")
            table.add_column("peer address", overflow="fold")
        colours = {"online": "green", "offline": "yellow"}
        rows = []
        for member in members:
            state = member.presence
            cells = [
                str(member.client_id),
                escape(member.host) or _MISSING,  # a participant's words: no rich markup
                f"[{colours[state]}]{state}" if state in colours else state,
                "now" if state == "online" else _when(member.last_seen, "never"),
                "yes" if member.supernode_registered else "no",
                "revoked" if member.revoked else _until(member.cert_not_after),
            ]
            if detailed:
                address = escape(member.peer_address) or _MISSING
                cells += [_optional(member.flower_node_id or None), address]
            table.add_row(*cells)
            rows.append(cells)
        print_table(console, table, rows, lead=3)
    else:
        console.print("no members yet (none enrolled, registered or joined a run)")
    if error:
        console.print(f"online/offline unknown: {error}", highlight=False)
    if unbound:
        nodes = ", ".join(map(str, unbound))
        console.print(
            f"{len(unbound)} SuperNodes online that are no member's: {nodes} (their keys are "
            "not registered: collabfl admin register-supernode)",
            highlight=False,
        )


@admin_app.command("register-supernode")
def register_supernode(
    ctx: typer.Context,
    client_id: Annotated[int, typer.Option("--client-id", min=0, help="the member's client id")],
    key: Annotated[
        Path,
        typer.Option(exists=True, dir_okay=False, help="the member's supernode_key.pub"),
    ],
    state_dir: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            file_okay=False,
            help="the coordinator's --state-dir, on its machine: use the operator credential "
            "it keeps (default: your own)",
        ),
    ] = None,
) -> None:
    """Let a member's SuperNode join: the coordinator registers its key with the SuperLink and
    binds the Flower node id it gets to the client id; a key registered for the member
    before is unregistered (a rotated key must not join). Runs launched afterwards use it."""
    if state_dir is not None:
        ctx.obj = _local_operator(state_dir, ctx.obj.timeout_s)
    with _client(ctx) as client:
        node_id, old = client.register_supernode(client_id, key.read_text())
    replaced = f" (its old key, Flower node {old}, unregistered)" if old is not None else ""
    console.print(
        f"client {client_id}: SuperNode key registered as Flower node {node_id}{replaced}",
        highlight=False,
    )


def _local_operator(state_dir: Path, timeout_s: float) -> _Connection:
    """The connection of the operator credential a coordinator keeps in its state dir."""
    from collabfl.coordinator.operator_credential import FILE_NAME, OperatorCredential
    from collabfl.kernel.tls import ClientTLS

    path = state_dir / "pki" / FILE_NAME
    if not path.exists():
        _fail(
            f"{path}: no operator credential; has the coordinator daemon started with this "
            "--state-dir?",
            EXIT_REFUSED,
        )
    try:
        saved = OperatorCredential.load(path)
    except ValueError as error:
        _fail(error, EXIT_REFUSED)
    return _Connection(saved.coordinator, timeout_s, ClientTLS(saved.ca, saved.cert, saved.key))


@admin_app.command()
def runs(ctx: typer.Context, as_json: AsJson = False) -> None:
    """Every run, oldest first."""
    with _client(ctx) as client:
        all_runs = client.list_runs()
    if as_json:
        _print_json(all_runs)
        return
    if not all_runs:
        console.print("no runs")
        return
    _print_runs(all_runs)


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
    from collabfl.engine.config import ConfigError, load_config
    from collabfl.engine.methods import parse_method_spec, run_request
    from collabfl.engine.recording import safe_name

    try:
        settings = load_config(config, overrides)
        spec = parse_method_spec(method or settings.method, settings)
    except ConfigError as error:
        _fail(error, EXIT_REFUSED)
    run_id = run_id or f"{safe_name(spec.label)}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        options = RunOptions(
            expected_clients=clients, out_dir=out, message_timeout_s=message_timeout
        )
    except ValidationError as error:
        _fail("; ".join(problems(error)), EXIT_REFUSED)
    request = run_request(spec, options)
    if clients != settings.data.num_clients:
        console.print(
            f"note: a federation's clients bring their own data: the run's records name the "
            f"clients that join (--clients {clients}) and their data files, not the config's "
            f"data.num_clients ({settings.data.num_clients}) and partition",
            highlight=False,
        )
    with _client(ctx) as client:
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


LAUNCH_GRACE_S = 120.0
"""How long `start --wait` allows, beyond the join timeout, for the ServerApp to start."""


def _follow_join(client: CoordinatorClient, run_id: str, limit_s: float) -> None:
    """Print the run's status line as it changes until it no longer says the run is waiting
    for clients (they joined, or the join timeout ran out), or the run ended."""
    shown = ""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if run.message and run.message != shown:
            console.print(f"{run_id}: {run.message}", highlight=False)
            shown = run.message
        if not run.active:
            console.print(f"run {run_id}: {run.status}", highlight=False)
            return
        if shown and not shown.startswith("waiting for clients"):
            return
        time.sleep(1.0)
    console.print(
        f"run {run_id}: no word from its ServerApp in {limit_s:g} s; see collabfl admin "
        f"events {run_id} and the coordinator's log",
        highlight=False,
    )


@admin_app.command()
def stop(ctx: typer.Context, run_id: Annotated[str, typer.Argument(metavar="RUN")]) -> None:
    """Ask a run to stop; the ServerApp ends it cleanly after the current round."""
    with _client(ctx) as client:
        run = client.stop_run(run_id)
    console.print(f"run {run.run_id}: stop requested (status {run.status})", highlight=False)


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
    from collabfl.engine.report.graph_stats import (
        adjacency,
        mean_out_degree,
        sparsity,
        symmetry,
    )

    with _client(ctx) as client:
        if round_index is None:
            round_index = client.get_run(run_id).last_completed_round
            if round_index is None:
                _fail(f"run {run_id} has no recorded round yet", EXIT_REFUSED)
        record = client.get_round(run_id, round_index)
    matrix = adjacency(record.num_clients, record.edges)
    heatmap = None
    if png is not None:
        from collabfl.engine.report.plots import plot_adjacency_heatmaps
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
        _print_json({**document, **stats, **edges})
        return
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
    from collabfl.cli.graph_history import history_document, history_multigraph

    with _client(ctx) as client:
        run = client.get_run(run_id)
        history = client.get_graph_history(run_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt is ExportFormat.json:
        write_text(out, json.dumps(history_document(run, history), indent=1) + "\n", shared=True)
    else:
        import networkx as nx

        nx.write_graphml(history_multigraph(run, history), out)
    console.print(f"wrote {len(history)} rounds of run {run_id} to {out}", highlight=False)


@admin_app.command()
def metrics(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    as_json: AsJson = False,
) -> None:
    """Per round: test accuracy across clients of two models, labelled (each client's current
    model, and its best-validation model, which the report uses), and peer bytes downloaded."""
    with _client(ctx) as client:
        history = client.get_metrics(run_id)
    if as_json:  # JSON object keys are strings: rounds and client ids print as "0", "1", ...
        _print_json({"run_id": run_id, "rounds": history})
        return
    if not history:
        console.print(f"run {run_id} has no recorded round yet")
        return
    table = Table(
        "round", "clients", "current model: mean acc (min–max)", "best-validation model: mean acc",
        "peer bytes",
    )  # fmt: skip
    for round_index, by_client in history.items():
        fetched = sum(_number(m.get("bytes_fetched")) or 0 for m in by_client.values())
        current = _accuracies(by_client, "test_acc")
        best = _accuracies(by_client, "best_test_acc")
        table.add_row(
            str(round_index),
            str(len(by_client)),
            f"{_percent(fmean(current))} ({_percent(min(current))}–{_percent(max(current))})"
            if current
            else _MISSING,
            _percent(fmean(best)) if best else _MISSING,
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
    values = (_number(m.get(key)) for m in by_client.values())
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
    with _client(ctx) as client:
        history = client.get_metrics(run_id)
    ledger = {
        t: m for t, m in history.items() if any(v.get("utility") is not None for v in m.values())
    }
    if not ledger:
        _fail(f"run {run_id} has no market ledger (is it an iPFL run with a round done?)", 2)
    shown = max(ledger) if round_index is None else round_index
    if shown not in ledger:
        _fail(f"run {run_id} has no ledger for round {shown}", 2)
    if as_json:  # every round up to the one shown: the cumulative totals follow from them
        _print_json(
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
    console.print(table)


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
    with _client(ctx) as client:
        history = client.get_coalitions(run_id)
        if round_index is not None and round_index not in history:
            client.get_coalitions(run_id, round_index)  # refused if the round was never recorded
            _fail(f"run {run_id} recorded no coalitions in round {round_index}", EXIT_REFUSED)
    if not history:
        _fail(
            f"run {run_id} has no coalitions (is it a coalition method with a round done?)",
            EXIT_REFUSED,
        )
    shown = max(history) if round_index is None else round_index
    previous = max((t for t in history if t < shown), default=None)
    moves = [] if previous is None else coalition_moves(history[previous], history[shown])
    if as_json:
        typer.echo(json.dumps(coalitions_document(run_id, shown, history, previous, moves)))
        return
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
    with _client(ctx) as client:
        recorded = client.list_events(run_id or "")
    if as_json:
        _print_json(recorded)
        return
    if not recorded:
        console.print("no events" if every else f"run {run_id} has no events")
        return
    colours = {"info": "", "warning": "yellow", "error": "red"}
    headers = ["id", "time", *(["run"] if every else []), "round", "level", "kind", "client"]
    table = Table(*headers, "message")
    rows = []
    for event in recorded:
        level = event.level
        cells = [
            str(event.event_id),
            _time(event.time),
            *([escape(event.run_id) or _MISSING] if every else []),
            _optional(event.round),
            f"[{colours[level]}]{level}" if colours[level] else level,
            event.kind,
            _optional(event.client_id),
            escape(event.message),  # a participant's words may reach it: no rich markup
        ]
        table.add_row(*cells)
        rows.append(cells)
    print_table(console, table, rows, lead=len(headers))


def _runs_table(runs: list[Run], flower_runs: Mapping[str, int | None] | None = None) -> Table:
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
            _optional(run.last_completed_round),
            datetime.fromtimestamp(run.created_at).strftime("%Y-%m-%d %H:%M"),
        ]
        if flower_runs is not None:
            cells.append(_optional(flower_runs.get(run.run_id)))
        table.add_row(*cells)
    return table


def _print_runs(runs: list[Run], flower_runs: Mapping[str, int | None] | None = None) -> None:
    """The runs table, then each run's message on a line of its own (a status line such
    as "waiting for clients: 3/4 joined, 87 s left" needs the room a cell lacks)."""
    console.print(_runs_table(runs, flower_runs))
    for run in runs:
        if run.message:
            console.print(f"{run.run_id}: {run.message}", highlight=False, soft_wrap=True)


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


def _number(value: Any) -> float | None:
    """A finite metric value, or None for a missing, non-numeric or NaN one."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if is_number and math.isfinite(value) else None


def _percent(value: float) -> str:
    return f"{value * 100:.2f}%"


def _optional(value: int | None) -> str:
    return _MISSING if value is None else str(value)


def _when(timestamp: float, never: str) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else never


def _until(timestamp: float) -> str:
    """A certificate's expiry: its date, or that it has expired."""
    if not timestamp:
        return _MISSING
    day = datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d")
    return f"expired {day}" if timestamp < time.time() else day


def _time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"
