"""`collabfl admin invite | login | revoke | enrolments`: who may join the federation.

`invite` asks the coordinator for a single-use join token and prints the one command the
participant runs, with the token in its environment, never its arguments
(kernel/token_source.py says why); `login` spends an operator's token from any machine and
saves the
credential every other `admin` command then uses; `revoke` takes an identity out
everywhere. coordinator/enrolment/enrolment.py says what the coordinator checks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from collabfl.cli.admin import tables
from collabfl.cli.admin.connection import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    admin_app,
    coordinator_client,
    fail,
)
from collabfl.cli.admin.tables import AsJson, clock, print_json
from collabfl.coordinator.enrolment.operator_credential import OperatorCredential, default_path
from collabfl.kernel.token_source import ENV_VAR, ON_ARGV, read_token

DEFAULT_TTL = "24h"
DATA_PLACEHOLDER = "DATA"
"""What the printed join line holds for ``--data``: only the lab knows where its data is."""
DATA_NOTE = (
    "In it, the lab replaces DATA with its data on its machine: an .npz file (`collabfl "
    "federation prepare` makes demo ones, client-K.npz) or its own loader, `pkg.mod:factory "
    "--allow-import pkg.mod:factory`"
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `24h`, `7d` as seconds."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.replace(".", "", 1).isdigit():
        raise typer.BadParameter(f"{text!r}: a number with a unit, s, m, h or d (e.g. 24h)")
    return float(number) * _UNITS[unit]


def _identity(client_id: int | None, operator: str | None) -> tuple[str, str]:
    """(role, subject) of the one identity named by `--client-id` or `--operator`."""
    if (client_id is None) == (operator is None):
        raise typer.BadParameter("give --client-id (a participant) or --operator, not both")
    return ("member", str(client_id)) if operator is None else ("operator", str(operator))


@admin_app.command()
def invite(
    ctx: typer.Context,
    client_id: Annotated[
        int | None, typer.Option("--client-id", min=0, help="invite this participant")
    ] = None,
    host: Annotated[
        list[str] | None,
        typer.Option(help="the participant's host name its peers dial (repeat for more names)"),
    ] = None,
    operator: Annotated[str | None, typer.Option(help="invite this operator instead")] = None,
    ttl: Annotated[str, typer.Option(help="how long the token stays valid")] = DEFAULT_TTL,
    samples: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="the participant's training samples, as you know them: runs hold its reported "
            "count to this (a run's federation.declared_sizes wins, with an event)",
        ),
    ] = None,
    data: Annotated[
        str,
        typer.Option(
            help="the participant's --data, when you know it (its file on its machine, or "
            "pkg.mod:factory); by default the printed command holds DATA for the lab to fill in"
        ),
    ] = DATA_PLACEHOLDER,
    state_dir: Annotated[
        str, typer.Option(help="the participant's state folder, for the printed command")
    ] = "/var/lib/collabfl-client",
    as_json: AsJson = False,
) -> None:
    """Mint a one-time join token and print the command that spends it."""
    role, subject = _identity(client_id, operator)
    if samples is not None and role != "member":
        raise typer.BadParameter("--samples declares a participant's data: use it with --client-id")
    with coordinator_client(ctx) as client:
        made = client.invite(role, subject, host or [], parse_duration(ttl), samples)
    if role == "member":
        command = (
            f"{ENV_VAR}={made.token} collabfl-client join {made.join_address} --data {data} "
            f"--state-dir {state_dir}"
        )
    else:
        command = f"{ENV_VAR}={made.token} collabfl admin login {made.join_address}"
    if as_json:
        fields = {"token": made.token, "token_id": made.token_id, "expires_at": made.expires_at}
        print_json({**fields, "role": role, "subject": subject, "command": command})
        return
    console = tables.console
    expires = clock(made.expires_at)
    console.print(f"{role} {subject}: token {made.token_id}, single use, expires {expires}")
    if role == "member" and data == DATA_PLACEHOLDER:
        console.print(DATA_NOTE, highlight=False)
    console.print("Run this on its machine:", highlight=False)
    typer.echo(command)  # plain: one line to copy, never wrapped, last


@admin_app.command()
def login(
    coordinator: Annotated[str, typer.Argument(help="the coordinator's public HOST:PORT (9093)")],
    token_file: Annotated[
        str | None,
        typer.Option(
            metavar="FILE",
            help=f"read the join token from FILE (- for standard input) instead of {ENV_VAR}",
        ),
    ] = None,
    token: Annotated[str | None, typer.Option(hidden=True)] = None,
    credential: Annotated[
        Path | None, typer.Option(dir_okay=False, help="where to save it (default: yours)")
    ] = None,
) -> None:
    """Enrol as an operator with the token `admin invite --operator` printed (from
    COLLABFL_JOIN_TOKEN or --token-file): make a key here, get its certificate, save the
    credential."""
    # cryptography and gRPC load here, not at start-up
    from cryptography.hazmat.primitives.asymmetric import ec

    from collabfl.kernel.join_client import JoinFailed, NotYet, join
    from collabfl.kernel.pki import private_key_pem

    if token is not None:
        raise typer.BadParameter(ON_ARGV, param_hint="--token")
    try:
        secret = read_token(token_file)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        joined = join(coordinator, secret, key)
    except JoinFailed as error:
        fail(error, EXIT_UNREACHABLE if isinstance(error, NotYet) else EXIT_REFUSED)
    if joined.role != "operator":
        fail(
            f"this token enrols {joined.role} {joined.subject}: use `collabfl-client join`",
            EXIT_REFUSED,
        )
    path = credential or default_path()
    OperatorCredential(joined.service, joined.ca, joined.certificate, private_key_pem(key)).save(
        path
    )
    tables.console.print(
        f"logged in as operator {joined.subject} at {joined.service}; saved {path}"
    )


@admin_app.command()
def revoke(
    ctx: typer.Context,
    client_id: Annotated[int | None, typer.Option("--client-id", min=0)] = None,
    operator: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Take a participant (or operator) out: its certificate is refused by the coordinator
    and every peer, its SuperNode unregistered. A fresh invite enrols it again."""
    role, subject = _identity(client_id, operator)
    with coordinator_client(ctx) as client:
        revoked = client.revoke(role, subject)
    tables.console.print(f"{role} {subject}: revoked (certificate serial {revoked.cert_serial})")


@admin_app.command()
def enrolments(ctx: typer.Context, as_json: AsJson = False) -> None:
    """Every identity that joined by token: host, certificate expiry, revoked or not."""
    with coordinator_client(ctx) as client:
        found = client.list_enrolments()
    if as_json:
        print_json(found)
        return
    table = Table("role", "name", "host", "samples", "certificate expires", "enrolled", "status")
    now = time.time()
    for e in found:
        status = "revoked" if e.revoked else ("expired" if e.cert_not_after < now else "active")
        declared = "" if e.samples is None else str(e.samples)
        table.add_row(e.role, e.subject, e.host, declared, clock(e.cert_not_after),
                      clock(e.enrolled_at), status)  # fmt: skip
    tables.console.print(table if found else "nobody enrolled by token yet")
