"""``collabfl-coordinator``: the federation's coordinator process.

It supervises a Flower SuperLink (no runtime dependency installation) listening on loopback
only, for the coordinator's own user alone where the platform tells who calls
(coordinator/superlink/owner_gated_superlink.py), faces the network with a Fleet-only gateway in
front of it (coordinator/gateway/fleet_gateway.py: SuperNodes get in, ``flwr run`` and the
Control API do not), serves the coordinator gRPC service (members, runs, rounds, graphs,
metrics, events, grants; SQLite under ``--state-dir``) and launches the Flower ServerApp of
every active run (a Flower run started through the Control API from this process, no
``flwr`` CLI), each with a run ticket the clients check (kernel/tickets.py)
and the registered SuperNode node ids of its members. With TLS the SuperLink requires SuperNode
authentication: only SuperNodes whose key an operator registered (``collabfl admin
register-supernode``) join; the SuperLink keeps its state in memory unless ``--superlink-state
disk``, so each of its starts gets every bound key again
(coordinator/superlink/supernode_restore.py). A run whose ServerApp dies while the run is still
active (a SuperLink or coordinator restart) is launched again and resumes after its last
completed round; a restarted coordinator first kills what its killed predecessor left running,
such as that ServerApp retrying the dead SuperLink (kernel/leftovers.py).

Every launch gets a fresh token (``launch``): only the latest launch's ServerApp may write
the run's rounds and events. With TLS, the service admits callers by the role their
certificate (from ``--ssl-ca-certfile``) names, and the ServerApp dials it with the
coordinator's own certificate.

This module starts the parts and stops them; each part is its own module: the settings
(coordinator/settings.py: the flags, one model built once), the SuperLink
(superlink/local_superlink.py: its command, its Control API, the ``flwr`` connection to it)
and the launches (superlink/run_launcher.py). The rooms of coordinator/ are described in
their ``__init__``: store/, enrolment/, gateway/ (the public port), relay/ and superlink/.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from collabfl.coordinator.enrolment.coordinator_pki import (
    CERT_DAYS,
    LOCAL_OPERATOR,
    CannotIssue,
    CoordinatorTLSFiles,
)
from collabfl.coordinator.enrolment.enrolment import Enroller, SuperNodeRegistry
from collabfl.coordinator.enrolment.operator_credential import FILE_NAME as OPERATOR_FILE
from collabfl.coordinator.enrolment.operator_credential import OperatorCredential
from collabfl.coordinator.enrolment.operator_credential import default_path as default_operator_path
from collabfl.coordinator.gateway.activation_refusals import ActivationRefusals
from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.gateway.fleet_gateway import FleetGateway, GatewayTLS
from collabfl.coordinator.gateway.join_endpoint import JoinEndpoint
from collabfl.coordinator.member_status import SupernodeList
from collabfl.coordinator.service import serve
from collabfl.coordinator.settings import (
    PUBLIC_KEY_FILE,
    CoordinatorSettings,
    check,
    gateway_limits,
    parser,
    public_names,
    with_tls_files,
)
from collabfl.coordinator.store.enrolment_store import EnrolmentStore
from collabfl.coordinator.store.state import CoordinatorState, CorruptDatabase, SchemaMismatch
from collabfl.coordinator.superlink.flower_runs import app_fab
from collabfl.coordinator.superlink.local_superlink import (
    LOOPBACK,
    SUPERLINK_RESTARTS,
    key_restorer,
    loopback_tls,
    report_control_api_access,
    superlink_command,
    superlink_control,
    superlink_starting,
    supernode_registry,
    write_flower_home,
)
from collabfl.coordinator.superlink.run_launcher import (
    SERVERAPP,
    RunLauncher,
    service_launch,
    write_app,
)
from collabfl.flower.processes import flower_env
from collabfl.flower.serverapp_launcher import ServerAppLauncher
from collabfl.flower.superexec_auth import ensure_secret
from collabfl.kernel import daemon_settings, exit_status
from collabfl.kernel.atomic import keep_private
from collabfl.kernel.grants import (
    GrantSigner,
    generate_private_key,
    load_private_key,
    save_private_key,
    save_public_key,
)
from collabfl.kernel.identity import Identity, Role
from collabfl.kernel.leftovers import owner_env, reap_leftovers
from collabfl.kernel.pki import issue, private_key_pem
from collabfl.kernel.ports import PortReservation
from collabfl.kernel.sealed import CLOCK_LEEWAY_S
from collabfl.kernel.supervisor import Supervisor
from collabfl.kernel.tickets import RunEnd, TicketSigner
from collabfl.kernel.tls import ServerTLS

log = logging.getLogger("collabfl.coordinator")

PRIVATE_KEY_FILE = "grant_key.pem"
"""The coordinator's Ed25519 key: it signs peer-fetch grants and run tickets."""


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


def fleet_gateway(
    settings: CoordinatorSettings,
    files: CoordinatorTLSFiles | None,
    activity: FleetActivity,
    state: CoordinatorState,
    enroller: Enroller | None = None,
    keys_ready: Callable[[], bool] = lambda: True,
) -> FleetGateway:
    """The public Fleet endpoint on ``--host:--superlink-port`` (TLS unless insecure),
    signalling through ``activity`` with the service; refused activations become events
    in ``state``; it takes joins for ``enroller``; activations wait for ``keys_ready``."""
    tls = loopback_tls(settings)
    scheme = "http" if tls is None else "https"
    public = None if files is None else GatewayTLS(files.cert, files.key)
    return FleetGateway(
        settings.host,
        settings.superlink_port,
        f"{scheme}://{LOOPBACK}:{settings.superlink_internal_port}",
        None if tls is None else tls.ca,
        public,
        activity=activity,
        enrolment=None
        if enroller is None
        else JoinEndpoint(enroller, partial(ended_runs, settings.run_ticket_ttl, state)),
        limits=gateway_limits(settings),
        on_refused_activation=ActivationRefusals(state, keys_ready=keys_ready).record,
        keys_ready=keys_ready,
    )


def ended_runs(ticket_ttl_s: float, state: CoordinatorState) -> dict[str, RunEnd]:
    """The runs whose tickets may still be unexpired, with their ends: participants refuse
    a ticket issued before its run's end (kernel/tickets.py)."""
    return state.run_ends(since=time.time() - ticket_ttl_s - CLOCK_LEEWAY_S)


def make_enroller(
    settings: CoordinatorSettings,
    files: CoordinatorTLSFiles,
    state: CoordinatorState,
    registry: SuperNodeRegistry,
) -> Enroller:
    """Enrolment for this coordinator: SuperNodes registered through its own SuperLink."""
    name = public_names(settings)[0]
    return Enroller(
        files,
        EnrolmentStore(state.database),  # one connection for the file's stores
        state,
        registry,
        (settings.state_dir / PUBLIC_KEY_FILE).read_bytes(),
        service_address=settings.advertise or f"{name}:{settings.service_port}",
        join_address=f"{name}:{settings.superlink_port}",
    )


def write_local_operator(state_dir: Path, files: CoordinatorTLSFiles, port: int) -> None:
    """An operator credential for this machine (STATE/pki/operator.json), and a copy in the
    daemon user's config folder when that holds none, so that ``collabfl admin`` here
    needs no flags. Skipped (with a line) when the coordinator cannot issue."""
    try:
        ca_key, ca_cert = files.signing_ca()
    except CannotIssue as error:
        log.info("no local operator credential: %s", error)
        return
    path = state_dir / "pki" / OPERATOR_FILE
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


def main(argv: list[str] | None = None) -> int:
    try:
        given = daemon_settings.load(
            CoordinatorSettings, parser(), sys.argv[1:] if argv is None else argv
        )
        check(given)
    except ValueError as error:
        print(f"collabfl-coordinator: {error}", file=sys.stderr)
        return exit_status.USAGE
    logging.basicConfig(
        level=given.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per forwarded Fleet call
    keep_private(given.state_dir)
    daemon_settings.save(given)
    try:
        files, settings = with_tls_files(given)
    except ValueError as error:
        print(f"collabfl-coordinator: {error}", file=sys.stderr)
        return exit_status.USAGE
    state_dir = settings.state_dir
    reap_leftovers(state_dir)  # a killed predecessor's ServerApps, before ours start
    if settings.superlink_internal_port:
        return run(settings, files)
    with PortReservation(1) as internal:  # held while the SuperLink (re)starts on it
        port = internal.ports[0]
        return run(settings.model_copy(update={"superlink_internal_port": port}), files)


def run(settings: CoordinatorSettings, files: CoordinatorTLSFiles | None) -> int:
    """Run the coordinator until it is told to stop (or its SuperLink kept failing)."""
    state_dir = settings.state_dir
    try:
        state = CoordinatorState(state_dir / "coordinator.db", settings.keep_ended_runs)
    except (CorruptDatabase, SchemaMismatch) as error:
        log.error("%s", error)
        return exit_status.FAILURE
    signer = grant_signer(state_dir, settings.public_dir)
    runs_dir = (settings.runs_dir or state_dir / "runs").resolve()
    tls = None if files is None else ServerTLS.from_files(files.cert, files.key, files.ca)
    env = {**flower_env(write_flower_home(settings)), **owner_env(state_dir)}
    stop = threading.Event()
    given_up: list[str] = []

    def give_up(name: str) -> None:
        given_up.append(name)
        stop.set()

    # The SuperLink first: its start takes longest, and SuperNodes that start beside this
    # daemon reach it through the gateway, which holds their calls until it answers.
    # With TLS only registered keys join: each SuperLink start needs them (the first too,
    # after a restart of this daemon).
    report_control_api_access(state, settings.superlink_internal_port)
    control = superlink_control(settings)
    registry = None if files is None else supernode_registry(control)
    restorer = None if registry is None else key_restorer(state, registry, control)
    if restorer is not None:
        restorer.start()
    superlink = Supervisor(
        "superlink", superlink_command(settings), state_dir / "superlink.log", env,
        SUPERLINK_RESTARTS, on_give_up=give_up,
        before_start=partial(superlink_starting, state_dir, restorer),
        after_exit=None if restorer is None else restorer.gone,
    )  # fmt: skip
    superlink.start()
    activity = FleetActivity()
    enroller = None
    if files is not None and registry is not None:
        enroller = make_enroller(settings, files, state, registry)
    keys_ready = (lambda: True) if restorer is None else restorer.ready.is_set
    gateway = fleet_gateway(settings, files, activity, state, enroller, keys_ready)
    gateway.start()
    log.info(
        "Fleet gateway on %s:%s, SuperLink on %s:%s",
        settings.host, settings.superlink_port, LOOPBACK, settings.superlink_internal_port,
    )  # fmt: skip
    address = f"{settings.host}:{settings.service_port}"
    supernodes = SupernodeList(control.nodes)
    server, port = serve(
        state, signer, address, tls, runs_dir=runs_dir, activity=activity,
        enroller=enroller, supernodes=supernodes,
    )  # fmt: skip
    log.info("coordinator service on %s:%s, runs in %s", settings.host, port, runs_dir)
    if files is not None:
        write_local_operator(state_dir, files, port)
    launcher = RunLauncher(
        state,
        state_dir,
        runs_dir,
        app_fab(write_app(state_dir)),
        control,
        service_launch(settings, files, port),
        ticket_signer(state_dir),
        settings.run_ticket_ttl,
        wake=activity.runs,
        enrolled_sizes=dict if enroller is None else enroller.store.declared_samples,
        superlink_ready=None if restorer is None else restorer.ready,
    )
    runtime_tls = loopback_tls(settings)
    serverapps = ServerAppLauncher(
        f"{LOOPBACK}:{settings.superlink_internal_port}",
        None if runtime_tls is None else runtime_tls.ca,
        ensure_secret(state_dir),
        launcher.submitted,
        state_dir / "serverapp-tokens",
        state_dir / "serverapps.log",
        {**os.environ, **env},
        on_foreign=launcher.foreign_run,
        preload=[SERVERAPP.split(":")[0]],
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
