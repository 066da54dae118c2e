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

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

from cryptography import x509

from collabfl import __version__
from collabfl.client.data.opening import check_data, data_ref
from collabfl.client.model_store import PUBLISHED_DIR, PublishedModels
from collabfl.client.peer_limits import MAX_PEER_WEIGHT
from collabfl.client.peer_server import PeerModelServer
from collabfl.client.revocations import RevocationPoller, revoked_line
from collabfl.client.stream_limits import StreamLimits
from collabfl.flower.node_config import NodeValue, write_node_config
from collabfl.flower.processes import (
    CLIENT_RUNTIMES,
    DEFAULT_RUNTIME,
    flower_binary,
    flower_env,
    wait_for_join,
    warm_executor_command,
)
from collabfl.flower.stale_node import clear_stale_node, preload
from collabfl.flower.superexec_auth import ensure_secret, rotate_secret
from collabfl.flower.supernode_diagnosis import SupernodeReasons, Where
from collabfl.flower.supernode_key import ensure_supernode_key
from collabfl.kernel import exit_status
from collabfl.kernel.atomic import keep_private
from collabfl.kernel.daemon_help import daemon_parser
from collabfl.kernel.grants import GrantVerifier, load_public_key_bytes
from collabfl.kernel.identity import Identity, identity_of_pem
from collabfl.kernel.leftovers import owner_env, reap_leftovers
from collabfl.kernel.netprobe import split_address
from collabfl.kernel.revocation import serial_hex
from collabfl.kernel.saved_args import save as save_args
from collabfl.kernel.saved_args import with_saved
from collabfl.kernel.supervisor import RestartPolicy, Supervisor
from collabfl.kernel.tls import ServerTLS
from collabfl.kernel.user_code import parse_allowed

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

log = logging.getLogger("collabfl.client")

JOIN_FIRST_S = 5.0
"""How long the warm executor's start waits for the SuperNode to join the SuperLink. Where
several clients share a machine (a local federation, the tests), their executors' imports
(torch and flwr: seconds of CPU each) held every SuperNode's joining back; no task can come
before the SuperNode has joined, and a run's first message comes seconds after that. Past
this, the executor starts anyway (a SuperNode that cannot join yet)."""


def parser() -> argparse.ArgumentParser:
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
    p.add_argument("--peer-listen", default="0.0.0.0:9200", help="peer server bind address")
    p.add_argument("--peer-address", help="HOST:PORT other participants reach this one's models at")
    p.add_argument(
        "--coordinator-key", type=Path, help="the coordinator's grant-signing public key (PEM)"
    )
    p.add_argument(
        "--runtime-port",
        type=int,
        default=9094,
        help="loopback port between this participant's own processes",
    )
    p.add_argument(
        "--runtime",
        choices=CLIENT_RUNTIMES,
        default=DEFAULT_RUNTIME,
        help="warm: one process serves every message (fastest); subprocess: a fresh one each",
    )
    p.add_argument(
        "--coordinator-service",
        default="",
        help="HOST:PORT of the coordinator service "
        "(default: the address the coordinator gives its runs, its --advertise)",
    )
    p.add_argument("--device", default="", help="cpu, cuda, cuda:N or auto (default: the run's)")
    p.add_argument("--keep-rounds", type=int, default=3, help="published rounds kept per run")
    p.add_argument(
        "--max-peer-weight",
        type=float,
        default=MAX_PEER_WEIGHT,
        help="a peer model with a weight of larger magnitude is refused for the round",
    )
    limits = p.add_argument_group("peer server limits")
    limits.add_argument(
        "--peer-send-timeout",
        type=float,
        default=StreamLimits.send_timeout_s,
        help="seconds a fetcher may take to read one chunk before its stream is cut",
    )
    limits.add_argument(
        "--peer-streams-per-fetcher",
        type=int,
        default=StreamLimits.streams_per_fetcher,
        help="concurrent model streams one member may hold",
    )
    limits.add_argument(
        "--peer-max-streams",
        type=int,
        default=StreamLimits.max_streams,
        help="concurrent model streams of all members together",
    )
    limits.add_argument(
        "--peer-publish-wait",
        type=float,
        default=StreamLimits.publish_wait_s,
        help="seconds a fetch of a round this node has not published yet waits for it",
    )
    p.add_argument(
        "--allow-import",
        action="append",
        default=[],
        metavar="PKG.MOD:ATTR",
        help="user code (model factory, loss, optimiser) runs may name; repeat for each. "
        "Nothing else is ever imported, whatever a run asks for",
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
        default=0,
        help="give up (and exit 1) after this many failed restarts in a row; 0 (default): "
        "never, the daemon waits for its SuperLink and registration for as long as it takes",
    )
    restarts.add_argument(
        "--restart-backoff-max",
        type=float,
        default=RestartPolicy.backoff_max_s,
        help="seconds between restarts grow 1, 2, 4, ... up to this",
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    return p


def restart_policy(args: argparse.Namespace) -> RestartPolicy:
    """The client's children are restarted for ever by default: what keeps its SuperNode
    out (a key not registered yet, an unreachable coordinator) is fixed by someone else,
    later, and the daemon should then join without being restarted by hand."""
    if args.max_restarts < 0:
        raise ValueError(f"--max-restarts must be >= 0 (0: for ever), got {args.max_restarts}")
    if not 0 < args.restart_backoff_max < float("inf"):
        raise ValueError(
            f"--restart-backoff-max must be a positive number of seconds, got "
            f"{args.restart_backoff_max}"
        )
    return RestartPolicy(args.max_restarts or None, args.restart_backoff_max)


def supernode_reasons(
    args: argparse.Namespace, revocations: RevocationPoller | None = None
) -> SupernodeReasons:
    """Why the SuperNode exits or is refused, worded with this daemon's own flags; with
    ``revocations``, a revoked member is told so rather than how to enrol."""
    where = Where(
        superlink=args.superlink,
        client_id=args.client_id,
        host=split_address(args.peer_address)[0],
        coordinator=args.superlink,  # joins dial the coordinator's public (Fleet) port
        root_certificates=args.root_certificates,
    )
    if revocations is None:
        return SupernodeReasons(where)
    return SupernodeReasons(
        where, revoked=lambda: revocations.revoked, revoked_line=revoked_line(args.client_id)
    )


def own_serial(args: argparse.Namespace) -> tuple[int, str]:
    """(client id, serial) of this member's certificate, to spot it on the deny list."""
    certificate = x509.load_pem_x509_certificate(args.peer_cert.read_bytes())
    return args.client_id, serial_hex(certificate)


def ended_runs_file(args: argparse.Namespace) -> Path:
    """Where the revocation poller keeps the coordinator's ended runs for the ClientApp."""
    state_dir: Path = args.state_dir
    return state_dir / "ended-runs.json"


def supernode_command(args: argparse.Namespace) -> list[str]:
    """The SuperNode invocation: node config carries what the ClientApp needs."""
    data = args.data.resolve() if isinstance(args.data, Path) else args.data
    node_config: dict[str, NodeValue] = {
        "client-id": args.client_id,
        "data-path": str(data),
        "state-dir": str(args.state_dir.resolve()),
        "peer-address": args.peer_address,
        "coordinator-key": str(args.coordinator_key.resolve()),
        "keep-rounds": args.keep_rounds,
        "max-peer-weight": float(args.max_peer_weight),
    }
    if args.device:
        node_config["device"] = args.device
    if args.coordinator_service:
        node_config["coordinator-service"] = args.coordinator_service
    if args.allow_import:
        node_config["allow-import"] = ",".join(sorted(parse_allowed(args.allow_import)))
    for key in ("cost", "eagerness"):
        value = getattr(args, key)
        if value is not None:
            node_config[key] = float(value)
    if not args.insecure:  # the fetcher presents this member's certificate to its peers
        node_config["ended-runs"] = str(ended_runs_file(args).resolve())
        node_config["peer-ca"] = str(args.root_certificates.resolve())
        node_config["peer-cert"] = str(args.peer_cert.resolve())
        node_config["peer-key"] = str(args.peer_key.resolve())
    command = [
        flower_binary("flower-supernode"),
        "--superlink",
        args.superlink,
        "--port",
        str(args.runtime_port),
        "--node-config",
        str(write_node_config(args.state_dir, node_config)),
    ]
    # our executor serves it (start_flower), the only caller that holds the secret
    command += ["--isolation", "process"]
    command += ["--superexec-auth-secret-file", str(ensure_secret(args.state_dir).resolve())]
    if args.insecure:
        command.append("--insecure")
    else:
        private_key, _ = ensure_supernode_key(args.state_dir)
        command += [
            "--root-certificates",
            str(args.root_certificates),
            "--auth-supernode-private-key",
            str(private_key),
        ]
    return command


REQUIRED = ("client_id", "data", "superlink", "peer_address", "coordinator_key")
"""Flags every start needs: given, saved by an earlier start, or written by ``join``."""


def check_args(args: argparse.Namespace) -> None:
    """Fail before starting anything when the inputs are wrong."""
    missing = [f"--{name.replace('_', '-')}" for name in REQUIRED if getattr(args, name) is None]
    if missing:
        raise ValueError(
            f"{args.state_dir} holds no saved settings and {', '.join(missing)} "
            "were not given: enrol this machine with `COLLABFL_JOIN_TOKEN=TOKEN collabfl-client "
            "join COORDINATOR --data FILE --state-dir DIR`, or give every flag"
        )
    if args.device:  # torch is imported (seconds) only to check a device that is named
        from collabfl.kernel.devices import resolve_device

        resolve_device(args.device)  # ValueError naming the value and what exists
    # raises with the file name, or a factory's client, split and field, when malformed
    log.info("%s", check_data(args.data, args.client_id, parse_allowed(args.allow_import)))
    for flag, address in (("--superlink", args.superlink), ("--peer-address", args.peer_address)):
        try:
            split_address(address)
        except ValueError as error:
            raise ValueError(f"{flag}: {error}") from None
    restart_policy(args)
    parse_allowed(args.allow_import)  # a malformed --allow-import fails now, by name
    if not args.coordinator_key.is_file():
        raise SystemExit(f"--coordinator-key {args.coordinator_key} does not exist")
    if args.keep_rounds < 1:
        raise ValueError(f"--keep-rounds must be >= 1, got {args.keep_rounds}")
    if not 0 < args.max_peer_weight < float("inf"):
        raise ValueError(
            f"--max-peer-weight must be positive and finite, got {args.max_peer_weight}"
        )
    if args.insecure:
        log.warning(
            "client %s runs WITHOUT TLS: peers are not authenticated (loopback and tests only)",
            args.client_id,
        )
        return
    if not (args.root_certificates and args.peer_cert and args.peer_key):
        raise SystemExit("without --insecure, give --root-certificates, --peer-cert, --peer-key")
    named = identity_of_pem(args.peer_cert.read_bytes())
    if named != Identity.member(args.client_id):
        raise ValueError(
            f"--peer-cert {args.peer_cert} names {named}, not member {args.client_id}: "
            "use the certificate issued for this --client-id"
        )


def stream_limits(args: argparse.Namespace) -> StreamLimits:
    return StreamLimits(
        send_timeout_s=args.peer_send_timeout,
        streams_per_fetcher=args.peer_streams_per_fetcher,
        max_streams=args.peer_max_streams,
        publish_wait_s=args.peer_publish_wait,
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
    args: argparse.Namespace,
    give_up: Callable[[str], None],
    stop: threading.Event,
    revocations: RevocationPoller | None = None,
) -> list[Supervisor]:
    """Start the supervised SuperNode and, once it has joined (or ``JOIN_FIRST_S`` passed),
    its one executor (``give_up``: called with the name of one that keeps failing; ``stop``:
    set when the daemon is told to stop).

    Returned in the order to stop them: the executor before the SuperNode it serves.
    """
    env = {**flower_env(args.state_dir / "flwr"), **owner_env(args.state_dir)}
    policy = restart_policy(args)
    log_path = args.state_dir / "supernode.log"
    clear_stale = None
    if not args.insecure:  # the same key, so the same node: clear what a killed one left
        key, _ = ensure_supernode_key(args.state_dir)
        ca = args.root_certificates
        clear_stale = partial(clear_stale_node, log_path, args.superlink, ca, key)
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
        "supernode", supernode_command(args), log_path, env, policy, on_give_up=give_up,
        reasons=supernode_reasons(args, revocations), after_exit=supernode_died,
        before_start=partial(supernode_starting, args.state_dir, clear_stale),
    )  # fmt: skip
    supernode.start()
    wait_for_join(supernode.log_path, JOIN_FIRST_S, stop)
    if stop.is_set():
        return [supernode]
    executor = Supervisor(
        "executor",
        warm_executor_command(
            f"127.0.0.1:{args.runtime_port}",
            supernode_log=supernode.log_path.resolve(),
            per_task=args.runtime == "subprocess",
            secret_file=ensure_secret(args.state_dir).resolve(),
        ),
        args.state_dir / "executor.log",
        env,
        policy,
        on_give_up=give_up,
    )
    executor.start()
    executors.append(executor)
    return [executor, supernode]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    try:
        args = p.parse_args(with_saved(argv))
    except ValueError as error:
        print(f"collabfl-client: {error}", file=sys.stderr)
        return exit_status.USAGE
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per Fleet call we make
    try:
        check_args(args)
        limits = stream_limits(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"collabfl-client: {error}", file=sys.stderr)
        return exit_status.USAGE
    keep_private(args.state_dir)
    save_args(p, args, args.state_dir)
    reap_leftovers(args.state_dir)  # a killed predecessor's ClientApp processes
    # Before any child starts: a stop that arrives while they start still stops them.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    models = PublishedModels(args.state_dir / PUBLISHED_DIR, owner=args.client_id)
    verifier = GrantVerifier(load_public_key_bytes(args.coordinator_key))
    tls = None
    if not args.insecure:
        tls = ServerTLS.from_files(args.peer_cert, args.peer_key, args.root_certificates)
    server = PeerModelServer(models, verifier, address=args.peer_listen, tls=tls, limits=limits)
    port = server.start()
    log.info(
        "client %s: peer server on port %s, advertised as %s",
        args.client_id,
        port,
        args.peer_address,
    )
    revocations = None
    if not args.insecure:
        revocations = RevocationPoller(
            args.superlink,
            args.root_certificates,
            ended_runs=ended_runs_file(args),
            own=own_serial(args),
        )
        revocations.start()
    given_up: list[str] = []

    def give_up(name: str) -> None:
        given_up.append(name)
        stop.set()

    children = start_flower(args, give_up, stop, revocations)
    stop.wait()
    log.info("client %s: shutting down", args.client_id)
    for child in children:
        child.stop_restarting()
    for child in children:
        child.stop()
    if revocations is not None:
        revocations.stop()
    server.stop(grace=2.0)
    if given_up:
        log.error("client %s: its %s kept failing; exiting", args.client_id, given_up[0])
        return exit_status.FAILURE
    return exit_status.OK


if __name__ == "__main__":
    sys.exit(main())
