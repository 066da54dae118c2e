"""`collabfl admin status | members | register-supernode`: the coordinator's state, the
federation's members and their SuperNodes."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from collabfl.cli.admin import tables
from collabfl.cli.admin.connection import admin_app, coordinator_client, local_operator
from collabfl.cli.admin.tables import (
    MISSING,
    AsJson,
    duration,
    optional,
    print_json,
    print_runs,
    until,
    when,
)

if TYPE_CHECKING:
    from collabfl.coordinator.member_status import MemberStatus


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
    with coordinator_client(ctx) as client:
        state = client.status()
    flower_runs = None
    if state_dir is not None:
        # reads the SuperLink's state: gRPC, protobuf and SQLite load only here
        from collabfl.coordinator.superlink.flower_status import flower_run_id

        flower_runs = {run.run_id: flower_run_id(state_dir, run) for run in state.active_runs}
    if as_json:
        extra = {} if flower_runs is None else {"flower_runs": flower_runs}
        print_json({"coordinator": ctx.obj.address, **asdict(state), **extra})
        return
    console = tables.console
    console.print(
        f"coordinator {ctx.obj.address}: up {duration(state.uptime_s)}, database {state.db_path}",
        highlight=False,
    )
    online = sum(m.presence == "online" for m in state.members)
    known = "" if state.supernodes_error else f" ({online} online)"
    console.print(
        f"{state.num_members} members{known}, {state.num_runs} runs, "
        f"{len(state.active_runs)} active",
        highlight=False,
    )
    print_members(state.members, state.supernodes_error, state.unbound_nodes, detailed=False)
    if state.active_runs:
        print_runs(state.active_runs, flower_runs)


@admin_app.command()
def members(ctx: typer.Context, as_json: AsJson = False) -> None:
    """The federation's members: client id, host, online, last seen, SuperNode registered,
    certificate expiry, Flower node and peer address."""
    with coordinator_client(ctx) as client:
        state = client.status()
    if as_json:
        print_json(state.members)
        return
    print_members(state.members, state.supernodes_error, state.unbound_nodes, detailed=True)


def print_members(
    members: list[MemberStatus], error: str, unbound: list[int], detailed: bool
) -> None:
    """The members table, then why presence is unknown and which nodes belong to no one."""
    console = tables.console
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
            cells: list[tables.Cell] = [
                str(member.client_id),
                member.host or MISSING,  # a participant's words: printed as written
                Text(state, style=colours[state]) if state in colours else state,
                "now" if state == "online" else when(member.last_seen, "never"),
                "yes" if member.supernode_registered else "no",
                "revoked" if member.revoked else until(member.cert_not_after),
            ]
            if detailed:
                address = member.peer_address or MISSING
                cells += [optional(member.flower_node_id or None), address]
            table.add_row(*cells)
            rows.append(cells)
        tables.print_table(console, table, rows, lead=3)
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
        ctx.obj = local_operator(state_dir, ctx.obj.timeout_s)
    with coordinator_client(ctx) as client:
        node_id, old = client.register_supernode(client_id, key.read_text())
    replaced = f" (its old key, Flower node {old}, unregistered)" if old is not None else ""
    tables.console.print(
        f"client {client_id}: SuperNode key registered as Flower node {node_id}{replaced}",
        highlight=False,
    )
