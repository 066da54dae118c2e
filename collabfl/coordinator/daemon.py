"""``collabfl-coordinator``: the federation's coordinator process.

It supervises a Flower SuperLink (no runtime dependency installation) listening on loopback
only, for the coordinator's own user alone where the platform tells who calls
(coordinator/owner_gated_superlink.py), faces the network with a Fleet-only gateway in front
of it (coordinator/fleet_gateway.py: SuperNodes get in, ``flwr run`` and the Control API do not),
serves the coordinator gRPC service (members, runs, rounds, graphs, metrics, events,
grants; SQLite under ``--state-dir``) and launches the Flower ServerApp of every active run
with ``flwr run``, each with a run ticket the clients check (kernel/tickets.py) and the
registered SuperNode node ids of its members. With TLS the SuperLink requires SuperNode
authentication: only SuperNodes whose key an operator registered (``collabfl admin
register-supernode``) join; the SuperLink keeps its state in memory unless ``--superlink-state
disk``, so each of its starts gets every bound key again (coordinator/supernode_restore.py).
A run whose ServerApp dies while the run is still active (a SuperLink or
coordinator restart) is launched again and resumes after its last completed round; a
restarted coordinator first kills what its killed predecessor left running, such as that
ServerApp retrying the dead SuperLink (kernel/leftovers.py).

Every launch gets a fresh token (``launch``): only the latest launch's ServerApp may write
the run's rounds and events. With TLS, the service admits callers by the role their
certificate (from ``--ssl-ca-certfile``) names, and the ServerApp dials it with the
coordinator's own certificate.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from collabfl import __version__
from collabfl.coordinator.activation_refusals import ActivationRefusals
from collabfl.coordinator.coordinator_pki import (
    CERT_DAYS,
    LOCAL_OPERATOR,
    CannotIssue,
    CoordinatorTLSFiles,
    ensure_pki,
)
from collabfl.coordinator.doorbell import Doorbell, FleetActivity
from collabfl.coordinator.enrolment import Enroller, SuperNodeRegistry
from collabfl.coordinator.enrolment_store import EnrolmentStore
from collabfl.coordinator.fleet_gateway import (
    FleetGateway,
    GatewayLimits,
    GatewayTLS,
    LoopbackTLS,
    free_loopback_port,
)
from collabfl.coordinator.flower_runs import (
    FlowerCliError,
    follow_command,
    stop_run,
    submit_run,
    submitted_run_id,
)
from collabfl.coordinator.join_endpoint import JoinEndpoint
from collabfl.coordinator.launch import (
    Launch,
    flower_run_file,
    launch_app_config,
    write_enrolled_sizes,
    write_launch_token,
)
from collabfl.coordinator.member_status import SupernodeList
from collabfl.coordinator.operator_credential import FILE_NAME as OPERATOR_FILE
from collabfl.coordinator.operator_credential import OperatorCredential
from collabfl.coordinator.operator_credential import default_path as default_operator_path
from collabfl.coordinator.service import serve
from collabfl.coordinator.state import (
    KEEP_ENDED_RUNS,
    CoordinatorState,
    CorruptDatabase,
    Run,
    SchemaMismatch,
)
from collabfl.coordinator.superlink_control import ControlError, SuperLinkControl
from collabfl.coordinator.supernode_restore import KeyRestorer
from collabfl.engine.run_options import flower_app_config
from collabfl.flower.binding import format_bindings
from collabfl.flower.processes import flower_binary, flower_env
from collabfl.flower.serverapp_launcher import ServerAppLauncher, SubmittedRuns
from collabfl.flower.superexec_auth import ensure_secret, rotate_secret
from collabfl.kernel import exit_status
from collabfl.kernel.atomic import keep_private, write_text
from collabfl.kernel.daemon_help import daemon_parser
from collabfl.kernel.grants import (
    GrantSigner,
    generate_private_key,
    load_private_key,
    save_private_key,
    save_public_key,
)
from collabfl.kernel.identity import Identity, Role
from collabfl.kernel.leftovers import owner_env, reap_leftovers
from collabfl.kernel.log_rotation import rotate_copy
from collabfl.kernel.pki import issue, private_key_pem
from collabfl.kernel.saved_args import save as save_args
from collabfl.kernel.saved_args import with_saved
from collabfl.kernel.sealed import CLOCK_LEEWAY_S
from collabfl.kernel.socket_owner import owner_lookup_available
from collabfl.kernel.supervisor import RestartPolicy, Supervisor, stop_group
from collabfl.kernel.tickets import RunEnd, TicketSigner
from collabfl.kernel.tls import ServerTLS

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

log = logging.getLogger("collabfl.coordinator")

LOOPBACK = "127.0.0.1"
APP_NAME = "collabfl-federation"
CONNECTION = "collabfl"
MAX_LAUNCHES = 4
CHECK_RUNS_S = 1.0
"""How often the launcher looks for runs to launch when nothing tells it: a new run rings
the ``runs`` doorbell and is launched at once; a ServerApp that died is noticed on this clock."""
SUPERLINK_RESTARTS = RestartPolicy(max_restarts=5, backoff_max_s=30.0)
"""The SuperLink is restarted 5 times in a row at most (about a minute), then the daemon
exits 1. Unlike a client's SuperNode, which waits on things other people fix (its key's
registration, the coordinator's address), the SuperLink runs on this machine, on loopback,
from our own files: one that fails six times in a row fails for a local reason waiting will
not cure (its port taken, its database corrupt, the disk full). Exiting says so to what
runs the daemon (systemd, compose), which restarts or alerts, and to the operator, with the
reason in the log's last line."""
SUPERLINK_STATES = ("memory", "disk")
IN_MEMORY_DATABASE = ":flwr-in-memory:"
"""The ``--database`` that makes flower-superlink keep its state and objects in Python dicts,
no SQLAlchemy (Flower's FLWR_IN_MEMORY_DB_NAME; tests/test_flower_contract_linkstate.py pins
it)."""
CONTROL_API_OPEN = "control_api_open"
"""The federation-wide event of a start whose SuperLink answers every local user."""
PRIVATE_KEY_FILE = "grant_key.pem"
"""The coordinator's Ed25519 key: it signs peer-fetch grants and run tickets."""
PUBLIC_KEY_FILE = "grant_key.pub.pem"
"""The grant verification key members load with ``collabfl-client --coordinator-key``."""


def parser() -> argparse.ArgumentParser:
    p = daemon_parser("collabfl-coordinator", DESCRIPTION, EXAMPLE)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--state-dir", type=Path, required=True, help="databases, keys, logs, runs")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)"
    )
    p.add_argument("--superlink-port", type=int, default=9093, help="port participants connect to")
    p.add_argument(
        "--superlink-internal-port",
        type=int,
        default=0,
        help="internal loopback port behind the participants' port (0: a free one)",
    )
    p.add_argument(
        "--superlink-state",
        choices=SUPERLINK_STATES,
        default="memory",
        help="where the SuperLink keeps its state: memory costs less than half the CPU per "
        "client-round; disk (STATE/superlink.db) also keeps Flower's run history across restarts",
    )
    p.add_argument(
        "--run-ticket-ttl",
        type=float,
        default=7 * 24 * 3600.0,
        help="seconds a launch's run ticket stays valid at most: participants refuse it once "
        "its run has ended (a relaunch issues a new one)",
    )
    p.add_argument(
        "--keep-ended-runs",
        type=int,
        default=KEEP_ENDED_RUNS,
        help="ended runs whose rounds and events the database keeps, latest first; older "
        "ones keep their status line (their records are in their run folders)",
    )
    p.add_argument(
        "--fleet-max-body-mib",
        type=int,
        default=GatewayLimits.max_body_bytes >> 20,
        help="largest request (MiB) accepted on the participants' port",
    )
    p.add_argument(
        "--fleet-per-peer",
        type=int,
        default=GatewayLimits.per_peer,
        help="connections one address may hold open on the participants' port (every "
        "route, joins too; SuperNodes behind one NAT share it)",
    )
    p.add_argument(
        "--fleet-body-timeout",
        type=float,
        default=GatewayLimits.body_timeout_s,
        help="seconds a request's body may take on the participants' port; a slower one is dropped",
    )
    p.add_argument(
        "--service-port",
        type=int,
        default=9300,
        help="port of the coordinator service (collabfl admin, participants)",
    )
    p.add_argument(
        "--advertise",
        default="",
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
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    return p


def grant_signer(state_dir: Path, public_dir: Path | None = None) -> GrantSigner:
    """Load the grant signing key, creating it on first start, and write its public half.

    The public half goes to the state dir and to ``public_dir`` when given: members mount
    only that folder, so no member can read the private key and forge grants.
    """
    private_path = state_dir / PRIVATE_KEY_FILE
    if not private_path.exists():
        save_private_key(generate_private_key(), private_path)
    signer = GrantSigner(load_private_key(private_path))
    for folder in {state_dir, public_dir or state_dir}:
        folder.mkdir(parents=True, exist_ok=True)
        save_public_key(signer.public_key_bytes(), folder / PUBLIC_KEY_FILE)
    return signer


def ticket_signer(state_dir: Path) -> TicketSigner:
    """Run tickets are signed with the grant key (``grant_signer`` makes it), so clients
    check both with the one public key they hold (``--coordinator-key``)."""
    return TicketSigner(load_private_key(state_dir / PRIVATE_KEY_FILE))


def flower_home(state_dir: Path) -> Path:
    """FLWR_HOME of the coordinator's own ``flwr`` commands (run, log, stop)."""
    return (state_dir / "flwr").resolve()


def loopback_tls(args: argparse.Namespace) -> LoopbackTLS | None:
    """TLS of the SuperLink behind the gateway; None in insecure mode."""
    return None if args.insecure else LoopbackTLS.ensure(args.state_dir / "superlink_tls")


def superlink_command(args: argparse.Namespace) -> list[str]:
    """The SuperLink on loopback: reachable from other hosts only through the gateway. It
    starts no ServerApp itself: the coordinator's ServerAppLauncher claims its tasks, signed
    with the state dir's SuperExec secret."""
    database = IN_MEMORY_DATABASE
    if args.superlink_state == "disk":
        database = str((args.state_dir / "superlink.db").resolve())
    command = [
        *superlink_program(),
        "--database",
        database,
        "--disable-runtime-dependency-installation",
        "--isolation",
        "process",
        "--superexec-auth-secret-file",
        str(ensure_secret(args.state_dir).resolve()),
        "--host",
        LOOPBACK,
        "--port",
        str(args.superlink_internal_port),
    ]
    tls = loopback_tls(args)
    if tls is None:
        return [*command, "--insecure"]
    return [
        *command,
        "--ssl-ca-certfile",
        str(tls.ca),
        "--ssl-certfile",
        str(tls.cert),
        "--ssl-keyfile",
        str(tls.key),
        "--enable-supernode-auth",
    ]


def superlink_program() -> list[str]:
    """Flower's SuperLink, gated on this user where the kernel names the owners of loopback
    connections (coordinator/owner_gated_superlink.py); Flower's own program elsewhere."""
    if owner_lookup_available():
        return [sys.executable, "-m", "collabfl.coordinator.owner_gated_superlink"]
    return [flower_binary("flower-superlink")]


def report_control_api_access(state: CoordinatorState, port: int) -> None:
    """Say at start who can use the SuperLink's loopback port: only this user, or (where
    the platform cannot tell who calls) every local user, as a warning and an event."""
    if owner_lookup_available():
        log.info(
            "the SuperLink's loopback port %s:%s answers only this user's processes (uid %s)",
            LOOPBACK, port, os.geteuid(),
        )  # fmt: skip
        return
    message = (
        f"the SuperLink's Control API on {LOOPBACK}:{port} answers every local user of this "
        "host (list, submit and stop runs): this platform does not tell who opens a loopback "
        "connection (no /proc/net/tcp) and Flower has no Control API authentication; keep "
        "other users off this host or close the port to them with a firewall owner rule"
    )
    log.warning("%s", message)
    state.record_event("", CONTROL_API_OPEN, message, "warning")


def superlink_starting(args: argparse.Namespace, restorer: KeyRestorer | None) -> None:
    """Before each SuperLink start: a new SuperExec secret (claims signed for the previous
    SuperLink cannot be replayed to this one, which may not know their nonces), and the
    bound SuperNode keys once it answers."""
    if restorer is not None:
        restorer.started()
    rotate_secret(args.state_dir)


def fleet_gateway(
    args: argparse.Namespace,
    activity: FleetActivity,
    state: CoordinatorState,
    enroller: Enroller | None = None,
    keys_ready: Callable[[], bool] = lambda: True,
) -> FleetGateway:
    """The public Fleet endpoint on ``--host:--superlink-port`` (TLS unless insecure),
    signalling through ``activity`` with the service; refused activations become events
    in ``state``; it takes joins for ``enroller``; activations wait for ``keys_ready``."""
    tls = loopback_tls(args)
    scheme = "http" if tls is None else "https"
    public = None if args.insecure else GatewayTLS(args.ssl_certfile, args.ssl_keyfile)
    return FleetGateway(
        args.host,
        args.superlink_port,
        f"{scheme}://{LOOPBACK}:{args.superlink_internal_port}",
        None if tls is None else tls.ca,
        public,
        activity=activity,
        enrolment=None
        if enroller is None
        else JoinEndpoint(enroller, partial(ended_runs, args, state)),
        limits=gateway_limits(args),
        on_refused_activation=ActivationRefusals(state, keys_ready=keys_ready).record,
        keys_ready=keys_ready,
    )


def ended_runs(args: argparse.Namespace, state: CoordinatorState) -> dict[str, RunEnd]:
    """The runs whose tickets may still be unexpired, with their ends: participants refuse
    a ticket issued before its run's end (kernel/tickets.py)."""
    return state.run_ends(since=time.time() - args.run_ticket_ttl - CLOCK_LEEWAY_S)


def superlink_control(args: argparse.Namespace) -> SuperLinkControl:
    """The Control API of this coordinator's SuperLink, called from this process."""
    tls = loopback_tls(args)
    address = f"{LOOPBACK}:{args.superlink_internal_port}"
    return SuperLinkControl(address, None if tls is None else tls.ca)


def local_superlink_control(state_dir: Path) -> SuperLinkControl:
    """The Control API of the SuperLink of the daemon whose state dir is ``state_dir`` (on
    this machine), found from the connection the daemon writes for ``flwr``; ValueError
    when the daemon has not written it (not started yet) or it cannot be read."""
    path = flower_home(state_dir) / "config.toml"
    try:
        connection = tomllib.loads(path.read_text())["superlink"][CONNECTION]
        address, ca = connection["address"], connection.get("root-certificates")
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: no SuperLink connection ({type(error).__name__}: {error}); has the "
            "coordinator daemon started with this --state-dir?"
        ) from None
    return SuperLinkControl(str(address), None if ca is None else Path(ca))


def supernode_registry(control: SuperLinkControl) -> SuperNodeRegistry:
    """Registers SuperNode keys with this coordinator's SuperLink, and removes them."""

    def unregister(node_id: int) -> None:
        try:
            control.unregister(node_id)
        except ControlError as error:  # already gone: what revocation wants
            log.info("SuperNode %s not unregistered: %s", node_id, error)

    return SuperNodeRegistry(control.register, unregister)


def key_restorer(
    state: CoordinatorState, registry: SuperNodeRegistry, control: SuperLinkControl
) -> KeyRestorer:
    """Gives each SuperLink start the bound SuperNode keys it does not know (TLS only)."""

    def known_nodes() -> list[int]:
        return [int(n["node-id"]) for n in control.nodes() if n["status"] != "unregistered"]

    return KeyRestorer(
        state, known_nodes, registry.register, registry.unregister, control.node_holding
    )


def make_enroller(
    args: argparse.Namespace,
    files: CoordinatorTLSFiles,
    state: CoordinatorState,
    registry: SuperNodeRegistry,
) -> Enroller:
    """Enrolment for this coordinator: SuperNodes registered through its own SuperLink."""
    name = public_names(args)[0]
    return Enroller(
        files,
        EnrolmentStore(state.database),  # one connection for the file's stores
        state,
        registry,
        (args.state_dir / PUBLIC_KEY_FILE).read_bytes(),
        service_address=args.advertise or f"{name}:{args.service_port}",
        join_address=f"{name}:{args.superlink_port}",
    )


def write_local_operator(args: argparse.Namespace, files: CoordinatorTLSFiles, port: int) -> None:
    """An operator credential for this machine (STATE/pki/operator.json), and a copy in the
    daemon user's config folder when that holds none, so that ``collabfl admin`` here
    needs no flags. Skipped (with a line) when the coordinator cannot issue."""
    try:
        ca_key, ca_cert = files.signing_ca()
    except CannotIssue as error:
        log.info("no local operator credential: %s", error)
        return
    path = args.state_dir / "pki" / OPERATOR_FILE
    if not path.exists():
        identity = Identity(Role.OPERATOR, LOCAL_OPERATOR)
        key, cert = issue(identity, [], ca_key, ca_cert, days=CERT_DAYS)
        OperatorCredential(
            f"127.0.0.1:{port}",
            files.ca.read_bytes(),
            cert.public_bytes(serialization.Encoding.PEM),
            private_key_pem(key),
        ).save(path)
    user_copy = default_operator_path()
    if not user_copy.exists():
        OperatorCredential.load(path).save(user_copy)
        log.info("operator credential for this machine's `collabfl admin`: %s", user_copy)


def gateway_limits(args: argparse.Namespace) -> GatewayLimits:
    """The Fleet gateway's limits from ``--fleet-*``; ValueError naming the flag when wrong."""
    if args.fleet_max_body_mib < 1 or args.fleet_per_peer < 1:
        raise ValueError(
            f"--fleet-max-body-mib ({args.fleet_max_body_mib}) and --fleet-per-peer "
            f"({args.fleet_per_peer}) must be at least 1"
        )
    if not 0 < args.fleet_body_timeout < float("inf"):
        raise ValueError(
            f"--fleet-body-timeout ({args.fleet_body_timeout}) must be a positive number of seconds"
        )
    return GatewayLimits(
        max_body_bytes=args.fleet_max_body_mib << 20,
        per_peer=args.fleet_per_peer,
        body_timeout_s=args.fleet_body_timeout,
    )


def write_app(state_dir: Path) -> Path:
    """The Flower app folder ``flwr run`` submits: components live in the installed package."""
    app_dir = state_dir / "app"
    app_dir.mkdir(parents=True, exist_ok=True)
    write_text(
        app_dir / "pyproject.toml",
        f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{APP_NAME}"
version = "1.0.0"
description = "collabfl round protocols (components come from the installed collabfl)"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "collabfl"

[tool.flwr.app.components]
serverapp = "collabfl.apps.server_app:app"
clientapp = "collabfl.apps.client_app:app"

[tool.flwr.app.config]
{launch_app_config()}
{flower_app_config()}
""",
    )
    return app_dir


def write_flower_home(args: argparse.Namespace) -> Path:
    """FLWR_HOME with one connection to our SuperLink on loopback, for ``flwr run``/``ls``."""
    home = flower_home(args.state_dir)
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f'default = "{CONNECTION}"', f"[superlink.{CONNECTION}]"]
    lines.append(f'address = "{LOOPBACK}:{args.superlink_internal_port}"')
    tls = loopback_tls(args)
    if tls is None:
        lines.append("insecure = true")
    else:
        lines.append(f'root-certificates = "{tls.ca.resolve()}"')
    write_text(home / "config.toml", "\n".join(lines) + "\n")
    return home


def service_launch(args: argparse.Namespace, port: int) -> Launch:
    """The launch entries every ServerApp gets: where the service is and, with TLS, the
    coordinator's own certificate to dial it with."""
    address = args.advertise or f"{public_names(args)[0]}:{port}"
    if args.insecure:
        return Launch(coordinator=address)
    return Launch(
        coordinator=address,
        coordinator_ca=str(args.ssl_ca_certfile.resolve()),
        coordinator_cert=str(args.ssl_certfile.resolve()),
        coordinator_key=str(args.ssl_keyfile.resolve()),
    )


class RunLauncher:
    """Starts (and restarts) the ServerApp of every active run and follows its log.

    Each launch mints the run's launch token (older ServerApps of the run can no longer
    write), submits the app with ``flwr run``, keeps flwr's JSON reply in the state directory
    (``flower_run_file``) and follows the Flower run's log into serverapp.log; when the
    follower ends (the run ended, or the SuperLink went away) and the run is still active, it
    launches again.

    ``service``: the launch entries every ServerApp gets (service address, TLS files).
    ``wake``: rung when a run is created, so that it launches without waiting for the clock.
    ``superlink_ready``: clear while a restarted SuperLink is given the SuperNode keys again
    (coordinator/supernode_restore.py); nothing launches then, so that no ServerApp gets the
    node ids of the SuperLink that died.
    """

    def __init__(
        self,
        state: CoordinatorState,
        state_dir: Path,
        runs_dir: Path,
        app_dir: Path,
        env: dict[str, str],
        service: Launch,
        tickets: TicketSigner,
        ticket_ttl_s: float,
        wake: Doorbell | None = None,
        check_every_s: float = CHECK_RUNS_S,
        submitted: SubmittedRuns | None = None,
        enrolled_sizes: Callable[[], Mapping[int, int]] = dict,
        superlink_ready: threading.Event | None = None,
    ) -> None:
        self.state = state
        if superlink_ready is None:
            superlink_ready = threading.Event()
            superlink_ready.set()
        self.superlink_ready = superlink_ready
        self.enrolled_sizes = enrolled_sizes
        self.submitted = submitted or SubmittedRuns()
        self.wake = wake or Doorbell()
        self.check_every_s = check_every_s
        self.tickets = tickets
        self.ticket_ttl_s = ticket_ttl_s
        self.state_dir = state_dir
        self.runs_dir = runs_dir
        self.app_dir = app_dir
        self.env = env
        self.service = service
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}  # run id -> its serverapp.log, rotated by size
        self.launches: dict[str, int] = {}
        self.stop_event = threading.Event()

    def loop(self) -> None:
        seen = self.wake.count
        while not self.stop_event.is_set():
            try:
                self.check_runs()
            except Exception:  # e.g. the database went away: keep trying
                log.exception("run launcher: checking runs failed; retrying")
            seen = self.wake.wait(seen, self.check_every_s)

    def check_runs(self) -> None:
        """Launch every active run that has no live ServerApp (new, or its ServerApp died).

        Each run on its own: one that cannot launch (a stored request no ServerApp could run)
        is failed with the reason, and the others still launch.
        """
        for run in self.state.runs():
            process = self.running.get(run.run_id)
            if process is not None and process.poll() is None:
                rotate_copy(self.logs[run.run_id])
            if not run.active or (process is not None and process.poll() is None):
                continue
            if not self.superlink_ready.is_set():
                continue
            if self.launches.get(run.run_id, 0) >= MAX_LAUNCHES:
                self.state.finish_run(run.run_id, "failed", "the ServerApp kept dying")
                continue
            try:
                self.launch(run)
            except ValueError as error:
                log.error("run %s cannot be launched: %s", run.run_id, error)
                self.state.finish_run(run.run_id, "failed", f"invalid run request: {error}")
            except Exception:
                log.exception("run %s: launching failed; retrying", run.run_id)

    def launch(self, run: Run) -> None:
        """Launch the run's ServerApp; ValueError if its stored request cannot run."""
        # Imported at the first launch, if the service's CreateRun has not done it yet (a run
        # resumed after a restart): it imports torch, whose CPU-second clients starting
        # beside the coordinator need to join.
        from collabfl.engine.methods import read_run_request

        count = self.launches[run.run_id] = self.launches.get(run.run_id, 0) + 1
        _, options = read_run_request(run.method, run.config)
        out_dir = options.run_dir(self.runs_dir, run.run_id)
        out_dir.mkdir(parents=True, exist_ok=True)
        options = options.model_copy(update={"out_dir": str(out_dir)})
        token = self.state.new_launch(run.run_id)  # from here on, older ServerApps are stale
        launch = replace(
            self.service,
            run_id=run.run_id,
            launch_token_file=str(write_launch_token(self.state_dir, run.run_id, token)),
            run_ticket=self.tickets.issue(run.run_id, self.ticket_ttl_s),
            node_bindings=format_bindings(self.state.supernode_bindings()),
            enrolled_sizes_file=str(
                write_enrolled_sizes(self.state_dir, run.run_id, self.enrolled_sizes())
            ),
        )
        settings = {**launch.to_run_config(), **options.to_run_config()}
        reply_path = flower_run_file(self.state_dir, run.run_id)
        self.stop_previous(run.run_id, reply_path)
        overrides = " ".join(f"{k}={json.dumps(v)}" for k, v in settings.items())
        log.info("launching run %s (attempt %s)", run.run_id, count)
        self.submitted.expect()  # its task may reach the ServerApp launcher before its id
        try:
            reply = submit_run(self.app_dir, CONNECTION, overrides, self.env)
            flower_run = submitted_run_id(reply)
            self.submitted.add(flower_run)  # its ServerApp may start now
        except FlowerCliError as error:
            self.submitted.abandon()
            log.error("run %s: the ServerApp was not started: %s", run.run_id, error)
            return  # no follower: the next check launches it again, up to MAX_LAUNCHES
        write_text(reply_path, reply)
        log.info("run %s: Flower run %s, log in %s", run.run_id, flower_run, out_dir)
        self.logs[run.run_id] = out_dir / "serverapp.log"
        with open(self.logs[run.run_id], "ab") as log_file:
            self.running[run.run_id] = subprocess.Popen(
                follow_command(flower_run, CONNECTION),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def stop_previous(self, run_id: str, reply_path: Path) -> None:
        """Stop the Flower run a previous launch of this run started, if it still runs.

        After a crash its ServerApp may survive and reconnect; two ServerApps must never
        drive the same run. The previous launch kept flwr's reply, which names that run.
        """
        if not reply_path.exists():
            return
        try:
            previous = submitted_run_id(reply_path.read_text(errors="replace"))
        except FlowerCliError as error:
            log.warning(
                "run %s: cannot read the previous launch's Flower run id from %s (%s); if its "
                "ServerApp still runs, stop it with `flwr stop <run id>`",
                run_id, reply_path, error,
            )  # fmt: skip
            return
        try:
            stop_run(previous, CONNECTION, self.env)
        except FlowerCliError as error:
            log.info("run %s: previous Flower run %s not stopped: %s", run_id, previous, error)
        else:
            log.info("run %s: stopped previous Flower run %s", run_id, previous)

    def foreign_run(self, flower_run_id: int) -> None:
        """A Flower run someone else submitted reached the ServerApp launcher: name it in an
        event and stop it, so it neither stays pending nor is claimed again."""
        self.state.record_event(
            "",
            "foreign_run_refused",
            f"Flower run {flower_run_id} was submitted to the SuperLink by someone other than "
            "this coordinator; its ServerApp was refused (nothing of it ran) and it is stopped",
        )
        threading.Thread(
            target=self._stop_foreign, args=(flower_run_id,), name="foreign-run-stop", daemon=True
        ).start()

    def _stop_foreign(self, flower_run_id: int) -> None:
        try:
            stop_run(flower_run_id, CONNECTION, self.env)
        except FlowerCliError as error:
            log.warning("foreign Flower run %s not stopped: %s", flower_run_id, error)
        else:
            log.warning("stopped foreign Flower run %s", flower_run_id)

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.ring()  # the loop ends now, not at its next check
        for process in self.running.values():
            stop_group(process, grace_s=5.0)


def public_names(args: argparse.Namespace) -> list[str]:
    """The names participants dial: ``--name``, else the bound host, else this machine's."""
    if args.name:
        return list(args.name)
    if args.host not in ("0.0.0.0", "::", ""):
        return [args.host]
    return [socket.getfqdn()]


def tls_files(args: argparse.Namespace) -> CoordinatorTLSFiles | None:
    """The coordinator's TLS files: brought (all three ``--ssl-*``) or made in STATE/pki.

    ValueError when only some of the three are given. The paths are also set on ``args``,
    which the components read.
    """
    if args.insecure:
        return None
    given = [args.ssl_ca_certfile, args.ssl_certfile, args.ssl_keyfile]
    if any(given) and not all(given):
        raise ValueError(
            "give all of --ssl-ca-certfile, --ssl-certfile and --ssl-keyfile (your own CA), or "
            "none of them (the coordinator makes its own in STATE/pki)"
        )
    if all(given):
        ca, cert, key = given
        files = CoordinatorTLSFiles(ca, cert, key, args.ca_keyfile)
    else:
        files = ensure_pki(args.state_dir / "pki", public_names(args))
    args.ssl_ca_certfile, args.ssl_certfile, args.ssl_keyfile = files.ca, files.cert, files.key
    return files


def main(argv: list[str] | None = None) -> int:
    p = parser()
    try:
        args = p.parse_args(with_saved(sys.argv[1:] if argv is None else argv))
    except ValueError as error:
        print(f"collabfl-coordinator: {error}", file=sys.stderr)
        return exit_status.USAGE
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per forwarded Fleet call
    try:
        gateway_limits(args)
        if args.keep_ended_runs < 0:
            raise ValueError(f"--keep-ended-runs ({args.keep_ended_runs}) must be at least 0")
    except ValueError as error:
        print(f"collabfl-coordinator: {error}", file=sys.stderr)
        return exit_status.USAGE
    keep_private(args.state_dir)
    save_args(p, args, args.state_dir)
    try:
        files = tls_files(args)
    except ValueError as error:
        print(f"collabfl-coordinator: {error}", file=sys.stderr)
        return exit_status.USAGE
    reap_leftovers(args.state_dir)  # a killed predecessor's ServerApps, before ours start
    if not args.superlink_internal_port:
        args.superlink_internal_port = free_loopback_port()
    try:
        state = CoordinatorState(args.state_dir / "coordinator.db", args.keep_ended_runs)
    except (CorruptDatabase, SchemaMismatch) as error:
        log.error("%s", error)
        return exit_status.FAILURE
    signer = grant_signer(args.state_dir, args.public_dir)
    runs_dir = (args.runs_dir or args.state_dir / "runs").resolve()
    tls = None
    if not args.insecure:
        tls = ServerTLS.from_files(args.ssl_certfile, args.ssl_keyfile, args.ssl_ca_certfile)
    env = {**flower_env(write_flower_home(args)), **owner_env(args.state_dir)}
    stop = threading.Event()
    given_up: list[str] = []

    def give_up(name: str) -> None:
        given_up.append(name)
        stop.set()

    # The SuperLink first: its start takes longest, and SuperNodes that start beside this
    # daemon reach it through the gateway, which holds their calls until it answers.
    # With TLS only registered keys join: each SuperLink start needs them (the first too,
    # after a restart of this daemon).
    report_control_api_access(state, args.superlink_internal_port)
    control = superlink_control(args)
    registry = None if files is None else supernode_registry(control)
    restorer = None if registry is None else key_restorer(state, registry, control)
    if restorer is not None:
        restorer.start()
    superlink = Supervisor(
        "superlink", superlink_command(args), args.state_dir / "superlink.log", env,
        SUPERLINK_RESTARTS, on_give_up=give_up,
        before_start=partial(superlink_starting, args, restorer),
        after_exit=None if restorer is None else restorer.gone,
    )  # fmt: skip
    superlink.start()
    activity = FleetActivity()
    enroller = None
    if files is not None and registry is not None:
        enroller = make_enroller(args, files, state, registry)
    keys_ready = (lambda: True) if restorer is None else restorer.ready.is_set
    gateway = fleet_gateway(args, activity, state, enroller, keys_ready)
    gateway.start()
    log.info(
        "Fleet gateway on %s:%s, SuperLink on %s:%s",
        args.host, args.superlink_port, LOOPBACK, args.superlink_internal_port,
    )  # fmt: skip
    address = f"{args.host}:{args.service_port}"
    supernodes = SupernodeList(control.nodes)
    server, port = serve(
        state, signer, address, tls, runs_dir=runs_dir, activity=activity,
        enroller=enroller, supernodes=supernodes,
    )  # fmt: skip
    log.info("coordinator service on %s:%s, runs in %s", args.host, port, runs_dir)
    if files is not None:
        write_local_operator(args, files, port)
    launcher = RunLauncher(
        state,
        args.state_dir,
        runs_dir,
        write_app(args.state_dir),
        {**os.environ, **env},
        service_launch(args, port),
        ticket_signer(args.state_dir),
        args.run_ticket_ttl,
        wake=activity.runs,
        enrolled_sizes=dict if enroller is None else enroller.store.declared_samples,
        superlink_ready=None if restorer is None else restorer.ready,
    )
    runtime_tls = loopback_tls(args)
    serverapps = ServerAppLauncher(
        f"{LOOPBACK}:{args.superlink_internal_port}",
        None if runtime_tls is None else runtime_tls.ca,
        ensure_secret(args.state_dir),
        launcher.submitted,
        args.state_dir / "serverapp-tokens",
        args.state_dir / "serverapps.log",
        {**os.environ, **env},
        on_foreign=launcher.foreign_run,
    )
    serverapps.start()
    thread = threading.Thread(target=launcher.loop, name="run-launcher", daemon=True)
    thread.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("coordinator: shutting down")
    if restorer is not None:
        restorer.stop()
    launcher.stop()
    serverapps.stop()
    gateway.stop()
    superlink.stop()
    server.stop(grace=2.0)
    control.close()
    state.close()
    if given_up:
        log.error("coordinator: its %s kept failing; exiting", given_up[0])
        return exit_status.FAILURE
    return exit_status.OK


if __name__ == "__main__":
    sys.exit(main())
