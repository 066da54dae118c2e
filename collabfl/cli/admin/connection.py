"""The `collabfl admin` command group itself: its options (which coordinator, TLS or not, whose
credential), the connection they make, and how a coordinator's refusal or silence ends a
command (one line on stderr, an exit code).

gRPC and the generated protocol load when a command talks to the coordinator, not at
start-up (``--help`` needs neither; `tests/test_cli_startup.py`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from collabfl.coordinator.enrolment.operator_credential import (
    FILE_NAME,
    OperatorCredential,
    default_path,
)
from collabfl.kernel import exit_status

if TYPE_CHECKING:
    from collabfl.coordinator.service_client import CoordinatorClient
    from collabfl.kernel.tls import ClientTLS

DEFAULT_COORDINATOR = "127.0.0.1:9300"
EXIT_REFUSED = exit_status.USAGE
EXIT_UNREACHABLE = exit_status.FAILURE

admin_app = typer.Typer(
    help="Inspect and steer a running coordinator.",
    rich_markup_mode="markdown",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@dataclass(frozen=True)
class Connection:
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
        ctx.obj = _credential_connection(saved, timeout, coordinator)
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
    ctx.obj = Connection(coordinator, timeout, tls)


def _saved_credential(path: Path | None) -> OperatorCredential | None:
    """The credential at `path` (it must be one), else the saved default, if any."""
    if path is None and not default_path().exists():
        return None
    try:
        return OperatorCredential.load(path or default_path())
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


def _credential_connection(
    saved: OperatorCredential, timeout_s: float, address: str | None = None
) -> Connection:
    """Mutual TLS as the credential's operator, to its coordinator unless `address` says."""
    from collabfl.kernel.tls import ClientTLS  # loads gRPC

    tls = ClientTLS(saved.ca, saved.cert, saved.key)
    return Connection(address or saved.coordinator, timeout_s, tls)


def local_operator(state_dir: Path, timeout_s: float) -> Connection:
    """The connection of the operator credential a coordinator keeps in its state dir."""
    path = state_dir / "pki" / FILE_NAME
    if not path.exists():
        fail(
            f"{path}: no operator credential; has the coordinator daemon started with this "
            "--state-dir?",
            EXIT_REFUSED,
        )
    try:
        saved = OperatorCredential.load(path)
    except ValueError as error:
        fail(error, EXIT_REFUSED)
    return _credential_connection(saved, timeout_s)


def _is_loopback(address: str) -> bool:
    """Whether HOST:PORT names this machine (plain gRPC cannot leave it then)."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fail(message: object, code: int) -> NoReturn:
    """End the command: one line on stderr, exit `code`."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def coordinator_client(ctx: typer.Context) -> Iterator[CoordinatorClient]:
    """A client for the command; coordinator failures become one stderr line and an exit code."""
    # gRPC and the generated protocol load here, not at start-up (--help needs neither)
    from collabfl.coordinator.service_client import (
        CoordinatorClient,
        CoordinatorError,
        CoordinatorUnreachable,
    )

    connection: Connection = ctx.obj
    try:
        with CoordinatorClient(connection.address, connection.timeout_s, connection.tls) as client:
            yield client
    except CoordinatorUnreachable as error:
        fail(error, EXIT_UNREACHABLE)
    except CoordinatorError as error:
        fail(error, EXIT_REFUSED)
