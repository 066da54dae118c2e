"""The coordinator daemon's settings: its command line, and the one model built from it.

``CoordinatorSettings`` holds every flag of ``collabfl-coordinator`` (the defaults live here;
the parser shows them), built once at start (kernel/daemon_settings.py: from the flags or
from the state dir's saved settings) and handed to every part of the daemon.
"""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field

from collabfl import __version__
from collabfl.coordinator.enrolment.coordinator_pki import CoordinatorTLSFiles, ensure_pki
from collabfl.coordinator.gateway.fleet_gateway import GatewayLimits
from collabfl.coordinator.store.state import KEEP_ENDED_RUNS
from collabfl.kernel.daemon_help import daemon_parser
from collabfl.kernel.daemon_settings import DaemonSettings, Port, Seconds

DESCRIPTION = """Run the federation's coordinator on this machine.

It serves the port participants connect to (only enrolled participants get through), the
coordinator service that operators drive with `collabfl admin` (members, runs, records,
grants), and the server side of every active run. Its first start makes the federation's
certificate authority and its own certificate under STATE_DIR/pki, and an operator credential
for this machine's user; then `collabfl admin invite` enrols each participant. A run that
was active when the coordinator stopped resumes after its last completed round."""
EXAMPLE = (
    "collabfl-coordinator --state-dir /var/lib/collabfl --host 0.0.0.0 --name coord.example.org"
)
PUBLIC_KEY_FILE = "grant_key.pub.pem"
"""The grant verification key members load with ``collabfl-client --coordinator-key``."""
SuperLinkState = Literal["memory", "disk"]
SUPERLINK_STATES = get_args(SuperLinkState)


class CoordinatorSettings(DaemonSettings):
    """Every flag of ``collabfl-coordinator`` (``parser`` says what each means)."""

    host: str = "127.0.0.1"
    superlink_port: Port = 9093
    superlink_internal_port: Port = 0
    superlink_state: SuperLinkState = "memory"
    run_ticket_ttl: Seconds = 7 * 24 * 3600.0
    keep_ended_runs: int = KEEP_ENDED_RUNS
    fleet_max_body_mib: int = GatewayLimits.max_body_bytes >> 20
    fleet_per_peer: int = GatewayLimits.per_peer
    fleet_body_timeout: float = GatewayLimits.body_timeout_s
    service_port: Port = 9300
    advertise: str = ""
    public_dir: Path | None = None
    runs_dir: Path | None = None
    name: tuple[str, ...] = Field(default=())
    insecure: bool = False
    ca_keyfile: Path | None = None
    ssl_ca_certfile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None


def parser() -> argparse.ArgumentParser:
    default = CoordinatorSettings.default
    p = daemon_parser("collabfl-coordinator", DESCRIPTION, EXAMPLE)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--state-dir", type=Path, required=True, help="databases, keys, logs, runs")
    p.add_argument(
        "--host",
        default=default("host"),
        help="address to listen on (0.0.0.0: every interface)",
    )
    p.add_argument(
        "--superlink-port",
        type=int,
        default=default("superlink_port"),
        help="port participants connect to",
    )
    p.add_argument(
        "--superlink-internal-port",
        type=int,
        default=default("superlink_internal_port"),
        help="internal loopback port behind the participants' port (0: a free one)",
    )
    p.add_argument(
        "--superlink-state",
        choices=SUPERLINK_STATES,
        default=default("superlink_state"),
        help="where the SuperLink keeps its state: memory costs less than half the CPU per "
        "client-round; disk (STATE/superlink.db) also keeps Flower's run history across restarts",
    )
    p.add_argument(
        "--run-ticket-ttl",
        type=float,
        default=default("run_ticket_ttl"),
        help="seconds a launch's run ticket stays valid at most: participants refuse it once "
        "its run has ended (a relaunch issues a new one)",
    )
    p.add_argument(
        "--keep-ended-runs",
        type=int,
        default=default("keep_ended_runs"),
        help="ended runs whose rounds and events the database keeps, latest first; older "
        "ones keep their status line (their records are in their run folders)",
    )
    p.add_argument(
        "--fleet-max-body-mib",
        type=int,
        default=default("fleet_max_body_mib"),
        help="largest request (MiB) accepted on the participants' port",
    )
    p.add_argument(
        "--fleet-per-peer",
        type=int,
        default=default("fleet_per_peer"),
        help="connections one address may hold open on the participants' port (every "
        "route, joins too; SuperNodes behind one NAT share it)",
    )
    p.add_argument(
        "--fleet-body-timeout",
        type=float,
        default=default("fleet_body_timeout"),
        help="seconds a request's body may take on the participants' port; a slower one is dropped",
    )
    p.add_argument(
        "--service-port",
        type=int,
        default=default("service_port"),
        help="port of the coordinator service (collabfl admin, participants)",
    )
    p.add_argument(
        "--advertise",
        default=default("advertise"),
        help="service address to give the runs (default: the first --name, at SERVICE_PORT)",
    )
    p.add_argument(
        "--public-dir",
        type=Path,
        help=f"also write {PUBLIC_KEY_FILE} here: a folder members may read, apart from the state",
    )
    p.add_argument(
        "--runs-dir", type=Path, help="the only folder runs may write into (default: STATE/runs)"
    )
    p.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="HOST",
        help="a name participants dial this machine by (repeatable; the first is the one "
        "invitations print): its certificate carries each",
    )
    tls = p.add_argument_group(
        "TLS: by default the coordinator makes its CA and certificate in STATE/pki on first "
        "start; give all three --ssl-* files to bring your own (omit all with --insecure)"
    )
    tls.add_argument("--insecure", action="store_true", help="no TLS (loopback/tests only)")
    tls.add_argument(
        "--ca-keyfile",
        type=Path,
        help="with your own --ssl-ca-certfile: its private key, so that members can enrol",
    )
    tls.add_argument(
        "--ssl-ca-certfile", type=Path, help="federation CA: verifies every caller's certificate"
    )
    tls.add_argument(
        "--ssl-certfile", type=Path, help="the coordinator's certificate (role coordinator)"
    )
    tls.add_argument("--ssl-keyfile", type=Path, help="its private key")
    p.add_argument(
        "--log-level",
        default=default("log_level"),
        help="DEBUG, INFO, WARNING or ERROR",
    )
    return p


def check(settings: CoordinatorSettings) -> None:
    """ValueError naming the flag when a value is out of its range (before anything starts)."""
    gateway_limits(settings)
    if settings.keep_ended_runs < 0:
        raise ValueError(f"--keep-ended-runs ({settings.keep_ended_runs}) must be at least 0")


def gateway_limits(settings: CoordinatorSettings) -> GatewayLimits:
    """The Fleet gateway's limits from ``--fleet-*``; ValueError naming the flag when wrong."""
    if settings.fleet_max_body_mib < 1 or settings.fleet_per_peer < 1:
        raise ValueError(
            f"--fleet-max-body-mib ({settings.fleet_max_body_mib}) and --fleet-per-peer "
            f"({settings.fleet_per_peer}) must be at least 1"
        )
    if not 0 < settings.fleet_body_timeout < float("inf"):
        raise ValueError(
            f"--fleet-body-timeout ({settings.fleet_body_timeout}) must be a positive number "
            "of seconds"
        )
    return GatewayLimits(
        max_body_bytes=settings.fleet_max_body_mib << 20,
        per_peer=settings.fleet_per_peer,
        body_timeout_s=settings.fleet_body_timeout,
    )


def public_names(settings: CoordinatorSettings) -> list[str]:
    """The names participants dial: ``--name``, else the bound host, else this machine's."""
    if settings.name:
        return list(settings.name)
    if settings.host not in ("0.0.0.0", "::", ""):
        return [settings.host]
    return [socket.getfqdn()]


def with_tls_files(
    settings: CoordinatorSettings,
) -> tuple[CoordinatorTLSFiles | None, CoordinatorSettings]:
    """The coordinator's TLS files, brought (all three ``--ssl-*``) or made in STATE/pki, and
    the settings that name them (what the components read); ValueError when only some of
    the three are given."""
    if settings.insecure:
        return None, settings
    given = [settings.ssl_ca_certfile, settings.ssl_certfile, settings.ssl_keyfile]
    if any(given) and not all(given):
        raise ValueError(
            "give all of --ssl-ca-certfile, --ssl-certfile and --ssl-keyfile (your own CA), or "
            "none of them (the coordinator makes its own in STATE/pki)"
        )
    ca, cert, key = given
    if ca is not None and cert is not None and key is not None:
        files = CoordinatorTLSFiles(ca, cert, key, settings.ca_keyfile)
    else:
        files = ensure_pki(settings.state_dir / "pki", public_names(settings))
    named = {"ssl_ca_certfile": files.ca, "ssl_certfile": files.cert, "ssl_keyfile": files.key}
    return files, settings.model_copy(update=named)
