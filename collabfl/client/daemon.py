"""``collabfl-client``: the long-lived process of one participant.

It runs the peer model server (serving this node's published models, per run, to peers
holding a coordinator-signed grant made out to them; over mutual TLS, so the server knows
which member calls, with the federation CA of ``--root-certificates`` as the client CA) and
supervises a Flower SuperNode whose ClientApp does the training, selection and evaluation.
With TLS the SuperNode authenticates with a key pair kept in the state directory
(flower/supernode_key.py) that the operator registers on the coordinator. The SuperNode
starts no ClientApp process of Flower's (which would install and import whatever app a run
names): this daemon supervises our executor (flower/warm_executor.py), which serves only
collabfl's installed ClientApp, for ticketed collabfl runs. With ``--runtime warm`` (the
default) it serves every message from one process with the node kept in memory; with
``--runtime subprocess``, each message from a fresh process.
Everything that must outlive one message lives here or in the state directory.
A SuperNode that exits or is refused is restarted for ever by default (capped back-off,
``--max-restarts``/``--restart-backoff-max``), each time with one log line saying why and
what fixes it (flower/supernode_diagnosis.py); as soon as a SuperNode dies, and again before
each start, the daemon marks the node it left online as offline (flower/stale_node.py): the
round in flight stops waiting for its lost reply, and the restart gets in.
SIGTERM/SIGINT stop both cleanly; a restarted daemon first kills what a killed predecessor's
SuperNode left running (kernel/leftovers.py), then serves what was published before, and
the node resumes from its saved state.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

from cryptography import x509

from collabfl.client.data.opening import check_data
from collabfl.client.model_store import PUBLISHED_DIR, PublishedModels
from collabfl.client.peer_server import PeerModelServer
from collabfl.client.revocations import RevocationPoller, revoked_line
from collabfl.client.settings import ParticipantSettings, parser
from collabfl.client.stream_limits import StreamLimits
from collabfl.flower.node_config import NodeValue, write_node_config
from collabfl.flower.processes import (
    executor_env,
    flower_env,
    wait_for_join,
    warm_executor_command,
)
from collabfl.flower.quick_reply_supernode import supernode_program
from collabfl.flower.stale_node import clear_stale_node, preload
from collabfl.flower.superexec_auth import ensure_secret, rotate_secret
from collabfl.flower.supernode_diagnosis import SupernodeReasons, Where
from collabfl.flower.supernode_key import ensure_supernode_key
from collabfl.kernel import daemon_settings, exit_status
from collabfl.kernel.atomic import keep_private
from collabfl.kernel.grants import GrantVerifier, load_public_key_bytes
from collabfl.kernel.identity import Identity, identity_of_pem
from collabfl.kernel.leftovers import owner_env, reap_leftovers
from collabfl.kernel.netprobe import split_address
from collabfl.kernel.revocation import serial_hex
from collabfl.kernel.supervisor import RestartPolicy, Supervisor
from collabfl.kernel.tls import ServerTLS
from collabfl.kernel.user_code import check_findable, parse_allowed

log = logging.getLogger("collabfl.client")

JOIN_FIRST_S = 5.0
"""How long the warm executor's start waits for the SuperNode to join the SuperLink. Where
several clients share a machine (a local federation, the tests), their executors' imports
(torch and flwr: seconds of CPU each) held every SuperNode's joining back; no task can come
before the SuperNode has joined, and a run's first message comes seconds after that. Past
this, the executor starts anyway (a SuperNode that cannot join yet)."""


def restart_policy(settings: ParticipantSettings) -> RestartPolicy:
    """The client's children are restarted for ever by default: what keeps its SuperNode
    out (a key not registered yet, an unreachable coordinator) is fixed by someone else,
    later, and the daemon should then join without being restarted by hand."""
    if settings.max_restarts < 0:
        raise ValueError(f"--max-restarts must be >= 0 (0: for ever), got {settings.max_restarts}")
    if not 0 < settings.restart_backoff_max < float("inf"):
        raise ValueError(
            f"--restart-backoff-max must be a positive number of seconds, got "
            f"{settings.restart_backoff_max}"
        )
    return RestartPolicy(settings.max_restarts or None, settings.restart_backoff_max)


def supernode_reasons(
    settings: ParticipantSettings, revocations: RevocationPoller | None = None
) -> SupernodeReasons:
    """Why the SuperNode exits or is refused, worded with this daemon's own flags; with
    ``revocations``, a revoked member is told so rather than how to enrol."""
    where = Where(
        superlink=settings.superlink,
        client_id=settings.client_id,
        host=split_address(settings.peer_address)[0],
        coordinator=settings.superlink,  # joins dial the coordinator's public (Fleet) port
        root_certificates=settings.root_certificates,
    )
    if revocations is None:
        return SupernodeReasons(where)
    return SupernodeReasons(
        where, revoked=lambda: revocations.revoked, revoked_line=revoked_line(settings.client_id)
    )


def own_serial(client_id: int, certificate_file: Path) -> tuple[int, str]:
    """(client id, serial) of this member's certificate, to spot it on the deny list."""
    certificate = x509.load_pem_x509_certificate(certificate_file.read_bytes())
    return client_id, serial_hex(certificate)


def ended_runs_file(state_dir: Path) -> Path:
    """Where the revocation poller keeps the coordinator's ended runs for the ClientApp."""
    return state_dir / "ended-runs.json"


def node_config(settings: ParticipantSettings) -> dict[str, NodeValue]:
    """What the ClientApp reads from its node config (apps/client_app.py, NodeSettings)."""
    data = settings.data.resolve() if isinstance(settings.data, Path) else settings.data
    config: dict[str, NodeValue] = {
        "client-id": settings.client_id,
        "data-path": str(data),
        "state-dir": str(settings.state_dir.resolve()),
        "peer-address": settings.peer_address,
        "coordinator-key": str(settings.coordinator_key.resolve()),
        "keep-rounds": settings.keep_rounds,
        "max-peer-weight": float(settings.max_peer_weight),
    }
    if settings.device:
        config["device"] = settings.device
    if settings.coordinator_service:
        config["coordinator-service"] = settings.coordinator_service
    if settings.allow_import:
        config["allow-import"] = ",".join(sorted(parse_allowed(list(settings.allow_import))))
    if settings.cost is not None:
        config["cost"] = float(settings.cost)
    if settings.eagerness is not None:
        config["eagerness"] = float(settings.eagerness)
    tls = settings.member_tls()
    if tls is not None:  # the fetcher presents this member's certificate to its peers
        config["ended-runs"] = str(ended_runs_file(settings.state_dir).resolve())
        for key, path in zip(("peer-ca", "peer-cert", "peer-key"), tls, strict=True):
            config[key] = str(path.resolve())
    return config


def supernode_command(settings: ParticipantSettings) -> list[str]:
    """The SuperNode invocation (Flower's, with a short reply poll: its module's doc); the
    node config carries what the ClientApp needs."""
    state_dir = settings.state_dir
    command = [
        *supernode_program(),
        "--superlink",
        settings.superlink,
        "--port",
        str(settings.runtime_port),
        "--node-config",
        str(write_node_config(state_dir, node_config(settings))),
    ]
    # our executor serves it (start_flower), the only caller that holds the secret
    command += ["--isolation", "process"]
    command += ["--superexec-auth-secret-file", str(ensure_secret(state_dir).resolve())]
    tls = settings.member_tls()
    if tls is None:
        command.append("--insecure")
    else:
        private_key, _ = ensure_supernode_key(state_dir)
        command += [
            "--root-certificates",
            str(tls[0]),
            "--auth-supernode-private-key",
            str(private_key),
        ]
    return command


def check_settings(settings: ParticipantSettings) -> None:
    """Fail before starting anything when the inputs are wrong."""
    if settings.device:  # torch is imported (seconds) only to check a device that is named
        from collabfl.kernel.devices import resolve_device

        resolve_device(settings.device)  # ValueError naming the value and what exists
    allowed = parse_allowed(list(settings.allow_import))  # a malformed one fails now, by name
    check_findable(allowed)  # and one this daemon's executor could never import
    # raises with the file name, or a factory's client, split and field, when malformed
    log.info("%s", check_data(settings.data, settings.client_id, allowed))
    for flag, address in (
        ("--superlink", settings.superlink),
        ("--peer-address", settings.peer_address),
    ):
        try:
            split_address(address)
        except ValueError as error:
            raise ValueError(f"{flag}: {error}") from None
    restart_policy(settings)
    if not settings.coordinator_key.is_file():
        raise ValueError(f"--coordinator-key {settings.coordinator_key} does not exist")
    if settings.keep_rounds < 1:
        raise ValueError(f"--keep-rounds must be >= 1, got {settings.keep_rounds}")
    if not 0 < settings.max_peer_weight < float("inf"):
        raise ValueError(
            f"--max-peer-weight must be positive and finite, got {settings.max_peer_weight}"
        )
    tls = settings.member_tls()
    if tls is None:
        log.warning(
            "client %s runs WITHOUT TLS: peers are not authenticated (loopback and tests only)",
            settings.client_id,
        )
        return
    cert = tls[1]
    named = identity_of_pem(cert.read_bytes())
    if named != Identity.member(settings.client_id):
        raise ValueError(
            f"--peer-cert {cert} names {named}, not member {settings.client_id}: "
            "use the certificate issued for this --client-id"
        )


def stream_limits(settings: ParticipantSettings) -> StreamLimits:
    return StreamLimits(
        send_timeout_s=settings.peer_send_timeout,
        streams_per_fetcher=settings.peer_streams_per_fetcher,
        max_streams=settings.peer_max_streams,
        publish_wait_s=settings.peer_publish_wait,
    )


def supernode_starting(state_dir: Path, clear_stale: Callable[[], None] | None) -> None:
    """Before each SuperNode start: a new SuperExec secret, then what a killed SuperNode left
    cleared. The SuperNode keeps the nonces of the claims it took in memory and forgets them
    when it restarts, so a claim recorded before must not verify after; the executor's
    signer reads the file again when it changes."""
    rotate_secret(state_dir)
    if clear_stale is not None:
        clear_stale()


def start_flower(
    settings: ParticipantSettings,
    give_up: Callable[[str], None],
    stop: threading.Event,
    revocations: RevocationPoller | None = None,
) -> list[Supervisor]:
    """Start the supervised SuperNode and, once it has joined (or ``JOIN_FIRST_S`` passed),
    its one executor (``give_up``: called with the name of one that keeps failing; ``stop``:
    set when the daemon is told to stop).

    Returned in the order to stop them: the executor before the SuperNode it serves.
    """
    state_dir = settings.state_dir
    env = {**flower_env(state_dir / "flwr"), **owner_env(state_dir)}
    policy = restart_policy(settings)
    log_path = state_dir / "supernode.log"
    clear_stale = None
    tls = settings.member_tls()
    if tls is not None:  # the same key, so the same node: clear what a killed one left
        key, _ = ensure_supernode_key(state_dir)
        clear_stale = partial(clear_stale_node, log_path, settings.superlink, tls[0], key)
        threading.Thread(target=preload, name="preload-flower", daemon=True).start()
    executors: list[Supervisor] = []

    def supernode_died() -> None:
        """Tell the SuperLink at once, and drop the task the executor may hold: its reply
        can no longer be delivered, and the restarted SuperNode's next message would wait
        for it (a round's training, tens of seconds)."""
        try:
            if clear_stale is not None:
                clear_stale()
        finally:
            for executor in executors:
                executor.kill_running("its SuperNode died")

    supernode = Supervisor(
        "supernode", supernode_command(settings), log_path, env, policy, on_give_up=give_up,
        reasons=supernode_reasons(settings, revocations), after_exit=supernode_died,
        before_start=partial(supernode_starting, state_dir, clear_stale),
    )  # fmt: skip
    supernode.start()
    wait_for_join(supernode.log_path, JOIN_FIRST_S, stop)
    if stop.is_set():
        return [supernode]
    executor = Supervisor(
        "executor",
        warm_executor_command(
            f"127.0.0.1:{settings.runtime_port}",
            supernode_log=supernode.log_path.resolve(),
            per_task=settings.runtime == "subprocess",
            secret_file=ensure_secret(state_dir).resolve(),
        ),
        state_dir / "executor.log",
        executor_env(env),
        policy,
        on_give_up=give_up,
    )
    executor.start()
    executors.append(executor)
    return [executor, supernode]


def main(argv: list[str] | None = None) -> int:
    try:
        settings = daemon_settings.load(
            ParticipantSettings, parser(), sys.argv[1:] if argv is None else argv
        )
    except ValueError as error:
        print(f"collabfl-client: {error}", file=sys.stderr)
        return exit_status.USAGE
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per Fleet call we make
    try:
        check_settings(settings)
        limits = stream_limits(settings)
    except (ValueError, FileNotFoundError) as error:
        print(f"collabfl-client: {error}", file=sys.stderr)
        return exit_status.USAGE
    keep_private(settings.state_dir)
    daemon_settings.save(settings)
    reap_leftovers(settings.state_dir)  # a killed predecessor's ClientApp processes
    return run(settings, limits)


def run(settings: ParticipantSettings, limits: StreamLimits) -> int:
    """Serve this member's models and run its SuperNode until told to stop (or one of its
    parts kept failing)."""
    # Before any child starts: a stop that arrives while they start still stops them.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    client_id = settings.client_id
    models = PublishedModels(settings.state_dir / PUBLISHED_DIR, owner=client_id)
    verifier = GrantVerifier(load_public_key_bytes(settings.coordinator_key))
    member_tls = settings.member_tls()
    tls = None
    if member_tls is not None:
        ca, cert, key = member_tls
        tls = ServerTLS.from_files(cert, key, ca)
    server = PeerModelServer(models, verifier, address=settings.peer_listen, tls=tls, limits=limits)
    port = server.start()
    log.info(
        "client %s: peer server on port %s, advertised as %s",
        client_id,
        port,
        settings.peer_address,
    )
    revocations = None
    if member_tls is not None:
        revocations = RevocationPoller(
            settings.superlink,
            member_tls[0],
            ended_runs=ended_runs_file(settings.state_dir),
            own=own_serial(client_id, member_tls[1]),
        )
        revocations.start()
    given_up: list[str] = []

    def give_up(name: str) -> None:
        given_up.append(name)
        stop.set()

    children = start_flower(settings, give_up, stop, revocations)
    stop.wait()
    log.info("client %s: shutting down", client_id)
    for child in children:
        child.stop_restarting()
    for child in children:
        child.stop()
    if revocations is not None:
        revocations.stop()
    server.stop(grace=2.0)
    if given_up:
        log.error("client %s: its %s kept failing; exiting", client_id, given_up[0])
        return exit_status.FAILURE
    return exit_status.OK


if __name__ == "__main__":
    sys.exit(main())
