"""The participant daemon's settings: its command line, and the one model built from it.

``ParticipantSettings`` holds every flag of ``collabfl-client`` (the defaults live here; the
parser shows them), built once at start (kernel/daemon_settings.py: from the flags, from the
state dir's saved settings, or from what ``collabfl-client join`` saved) and handed to every
part of the daemon.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AfterValidator

from collabfl import __version__
from collabfl.client.data.opening import DataRef, data_ref
from collabfl.client.peer_limits import MAX_PEER_WEIGHT
from collabfl.client.stream_limits import StreamLimits
from collabfl.flower.processes import CLIENT_RUNTIMES
from collabfl.kernel.daemon_help import daemon_parser
from collabfl.kernel.daemon_settings import DaemonSettings, Port
from collabfl.kernel.supervisor import RestartPolicy

DESCRIPTION = """Run one participant of a federation on this machine.

It takes part in every run the coordinator starts (training, choosing collaborators and
evaluating on this machine's data, which never leaves it) and lends its published models
only to the participants the coordinator grants. Start it once with
`COLLABFL_JOIN_TOKEN=... collabfl-client join COORDINATOR --data FILE --state-dir DIR`, which
enrols this
machine and saves these options; afterwards `collabfl-client --state-dir DIR` starts it
again with what was saved. It waits for the coordinator and restarts its parts for as long
as it takes unless --max-restarts says otherwise."""
EXAMPLE = "collabfl-client --state-dir /var/lib/collabfl-client --device cuda"
REQUIRED = ("client_id", "data", "superlink", "peer_address", "coordinator_key")
"""Flags every start needs: given, saved by an earlier start, or written by ``join``."""


def _as_data_ref(value: DataRef) -> DataRef:
    """A saved ``--data`` (JSON text) as the flag means it: a file, or a factory's import path."""
    return data_ref(value)  # what ``--data`` gave again: argparse ran it too


class ParticipantSettings(DaemonSettings):
    """Every flag of ``collabfl-client`` (``parser`` says what each means). Those without a
    default (``REQUIRED``) come from the flags, the saved settings or ``join``."""

    client_id: int
    data: Annotated[Path | str, AfterValidator(_as_data_ref)]
    superlink: str
    peer_listen: str = "0.0.0.0:9200"
    peer_address: str
    coordinator_key: Path
    runtime_port: Port = 9094
    runtime: Literal["warm", "subprocess"] = "warm"  # flower/processes.py: DEFAULT_RUNTIME
    coordinator_service: str = ""
    device: str = ""
    keep_rounds: int = 3
    max_peer_weight: float = MAX_PEER_WEIGHT
    peer_send_timeout: float = StreamLimits.send_timeout_s
    peer_streams_per_fetcher: int = StreamLimits.streams_per_fetcher
    peer_max_streams: int = StreamLimits.max_streams
    peer_publish_wait: float = StreamLimits.publish_wait_s
    allow_import: tuple[str, ...] = ()
    cost: float | None = None
    eagerness: float | None = None
    insecure: bool = False
    root_certificates: Path | None = None
    peer_cert: Path | None = None
    peer_key: Path | None = None
    max_restarts: int = 0
    restart_backoff_max: float = RestartPolicy.backoff_max_s

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> Self:
        """The settings a parsed command line gives; ValueError saying how to enrol when a
        flag every start needs is missing (no saved settings, no join)."""
        missing = [
            f"--{name.replace('_', '-')}" for name in REQUIRED if getattr(args, name) is None
        ]
        if missing:
            raise ValueError(
                f"{args.state_dir} holds no saved settings and {', '.join(missing)} were not "
                "given: enrol this machine with `COLLABFL_JOIN_TOKEN=TOKEN collabfl-client "
                "join COORDINATOR --data FILE --state-dir DIR`, or give every flag"
            )
        return super().from_flags(args)

    def member_tls(self) -> tuple[Path, Path, Path] | None:
        """This member's (CA, certificate, key); None with ``--insecure``. ValueError when
        one of the three is missing."""
        if self.insecure:
            return None
        ca, cert, key = self.root_certificates, self.peer_cert, self.peer_key
        if ca is None or cert is None or key is None:
            raise ValueError(
                "without --insecure, give --root-certificates, --peer-cert and --peer-key"
            )
        return ca, cert, key


def parser() -> argparse.ArgumentParser:
    default = ParticipantSettings.default
    p = daemon_parser("collabfl-client", DESCRIPTION, EXAMPLE)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--client-id", type=int, help="this participant's index")
    p.add_argument(
        "--data",
        type=data_ref,
        help="this participant's data file, or pkg.mod:factory, its own loader "
        "(factory(client_id) -> {train, val, test, num_classes}; needs --allow-import)",
    )
    p.add_argument("--state-dir", type=Path, required=True, help="models, state, logs")
    p.add_argument("--superlink", help="the coordinator's participant port, HOST:PORT")
    p.add_argument(
        "--peer-listen",
        default=default("peer_listen"),
        help="peer server bind address",
    )
    p.add_argument("--peer-address", help="HOST:PORT other participants reach this one's models at")
    p.add_argument(
        "--coordinator-key", type=Path, help="the coordinator's grant-signing public key (PEM)"
    )
    p.add_argument(
        "--runtime-port",
        type=int,
        default=default("runtime_port"),
        help="loopback port between this participant's own processes",
    )
    p.add_argument(
        "--runtime",
        choices=CLIENT_RUNTIMES,
        default=default("runtime"),
        help="warm: one process serves every message (fastest); subprocess: a fresh one each",
    )
    p.add_argument(
        "--coordinator-service",
        default=default("coordinator_service"),
        help="HOST:PORT of the coordinator service "
        "(default: the address the coordinator gives its runs, its --advertise)",
    )
    p.add_argument(
        "--device",
        default=default("device"),
        help="cpu, cuda, cuda:N or auto (default: the run's)",
    )
    p.add_argument(
        "--keep-rounds",
        type=int,
        default=default("keep_rounds"),
        help="published rounds kept per run",
    )
    p.add_argument(
        "--max-peer-weight",
        type=float,
        default=default("max_peer_weight"),
        help="a peer model with a weight of larger magnitude is refused for the round",
    )
    limits = p.add_argument_group("peer server limits")
    limits.add_argument(
        "--peer-send-timeout",
        type=float,
        default=default("peer_send_timeout"),
        help="seconds a fetcher may take to read one chunk before its stream is cut",
    )
    limits.add_argument(
        "--peer-streams-per-fetcher",
        type=int,
        default=default("peer_streams_per_fetcher"),
        help="concurrent model streams one member may hold",
    )
    limits.add_argument(
        "--peer-max-streams",
        type=int,
        default=default("peer_max_streams"),
        help="concurrent model streams of all members together",
    )
    limits.add_argument(
        "--peer-publish-wait",
        type=float,
        default=default("peer_publish_wait"),
        help="seconds a fetch of a round this node has not published yet waits for it",
    )
    p.add_argument(
        "--allow-import",
        action="append",
        default=[],
        metavar="PKG.MOD:ATTR",
        help="user code (model factory, loss, optimiser) runs may name; repeat for each. "
        "Nothing else is ever imported, whatever a run asks for. Found on PYTHONPATH or "
        "among installed packages, never in the working directory",
    )
    p.add_argument("--cost", type=float, help="iPFL: sharing cost this participant reports")
    p.add_argument("--eagerness", type=float, help="iPFL: data eagerness it reports")
    tls = p.add_argument_group("TLS (omit all with --insecure)")
    tls.add_argument("--insecure", action="store_true", help="no TLS anywhere (loopback/tests)")
    tls.add_argument(
        "--root-certificates", type=Path, help="the federation CA: of the SuperLink and members"
    )
    tls.add_argument(
        "--peer-cert",
        type=Path,
        help="this member's certificate (collabfl://member/<client id>): serves and fetches",
    )
    tls.add_argument("--peer-key", type=Path, help="its private key")
    restarts = p.add_argument_group("restarts of the SuperNode (and executor)")
    restarts.add_argument(
        "--max-restarts",
        type=int,
        default=default("max_restarts"),
        help="give up (and exit 1) after this many failed restarts in a row; 0 (default): "
        "never, the daemon waits for its SuperLink and registration for as long as it takes",
    )
    restarts.add_argument(
        "--restart-backoff-max",
        type=float,
        default=default("restart_backoff_max"),
        help="seconds between restarts grow 1, 2, 4, ... up to this",
    )
    p.add_argument(
        "--log-level",
        default=default("log_level"),
        help="DEBUG, INFO, WARNING or ERROR",
    )
    return p
