"""``COLLABFL_JOIN_TOKEN=T collabfl-client join COORDINATOR --data FILE --state-dir DIR``:
enrol this machine with a join token, then run the daemon.

The token never comes on the command line (kernel/token_source.py says why). The keys are
made here and never leave: a fresh TLS key (its certificate comes back from the
coordinator, kernel/join_client.py) and a fresh SuperNode key (the coordinator registers its
public half before the SuperNode first starts). What comes back is written to ``DIR/tls``
and the daemon's flags to ``DIR`` (kernel/saved_args.py), so a restart is
``collabfl-client --state-dir DIR``. Flags after the join's own go to the daemon as they
are (``--device cuda:1``, ``--runtime subprocess``, ...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from collabfl.client.data.client_file import load_client_file
from collabfl.flower.supernode_key import PRIVATE_NAME, PUBLIC_NAME, ensure_supernode_key
from collabfl.kernel import exit_status
from collabfl.kernel.atomic import keep_private, write_bytes
from collabfl.kernel.daemon_help import daemon_parser
from collabfl.kernel.join_client import JoinFailed, NotYet, coordinator_address, join
from collabfl.kernel.pki import write_private_key
from collabfl.kernel.saved_args import save
from collabfl.kernel.token_source import ENV_VAR, ON_ARGV, read_token

DESCRIPTION = f"""Enrol this machine in a federation with the join token its operator sent, then run
the participant (`collabfl-client`).

The token comes from the environment ({ENV_VAR}) or --token-file, never
from the command line, where other local users could read it. The keys are made on this
machine and never leave it. The certificate and the participant's options are saved under
--state-dir, so `collabfl-client --state-dir DIR` starts it again later. Options after the
join's own go to the participant as they are (e.g. --device cuda)."""
EXAMPLE = (
    f"{ENV_VAR}=cfj1.… collabfl-client join coord.example.org:9093 "
    "--data /data/lab-a.npz --state-dir /var/lib/collabfl-client"
)

TLS_DIR = "tls"
GRANT_KEY_FILE = "grant_key.pub.pem"
DEFAULT_PEER_LISTEN = "0.0.0.0:9200"


def parser() -> argparse.ArgumentParser:
    p = daemon_parser("collabfl-client join", DESCRIPTION, EXAMPLE)
    p.add_argument("coordinator", help="the coordinator's public HOST:PORT (its Fleet port, 9093)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"read the join token from FILE (- for standard input) instead of {ENV_VAR}",
    )
    p.add_argument("--token", help=argparse.SUPPRESS)  # refused, with the safe forms named
    p.add_argument("--data", type=Path, required=True, help="this participant's data file")
    p.add_argument("--state-dir", type=Path, required=True, help="models, keys, state, logs")
    p.add_argument(
        "--peer-listen",
        default=DEFAULT_PEER_LISTEN,
        help="where the peer server listens; its port is the one peers dial (default: %(default)s)",
    )
    p.add_argument(
        "--no-start",
        action="store_true",
        help="enrol and save the settings, then exit (a service manager starts the daemon "
        "later with `collabfl-client --state-dir DIR`)",
    )
    return p


def main(argv: list[str]) -> int:
    args, daemon_flags = parser().parse_known_args(argv)
    if args.token is not None:
        print(f"collabfl-client join: {ON_ARGV}", file=sys.stderr)
        return exit_status.USAGE
    try:
        token = read_token(args.token_file)
        load_client_file(args.data)  # a wrong file fails before the token is spent
        coordinator_address(args.coordinator)
        keep_private(args.state_dir)
        daemon_argv = enrol(args, token)
    except (JoinFailed, ValueError, FileNotFoundError) as error:
        print(f"collabfl-client join: {error}", file=sys.stderr)
        return exit_status.FAILURE if isinstance(error, NotYet) else exit_status.USAGE
    from collabfl.client import daemon

    restart = f"collabfl-client --state-dir {args.state_dir}"
    if args.no_start:
        flags = daemon.parser()
        save(flags, flags.parse_args([*daemon_argv, *daemon_flags]), args.state_dir)
        print(f"collabfl-client: enrolled; start it with `{restart}`", flush=True)
        return exit_status.OK
    print(f"collabfl-client: enrolled; restart it later with `{restart}`", flush=True)
    return daemon.main([*daemon_argv, *daemon_flags])


def enrol(args: argparse.Namespace, token: str) -> list[str]:
    """Spend the token; write what came back; the daemon's command line (without extras)."""
    state_dir: Path = args.state_dir.resolve()
    tls = state_dir / TLS_DIR
    tls.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in (PRIVATE_NAME, PUBLIC_NAME):  # a new enrolment gets a new SuperNode key
        (state_dir / stale).unlink(missing_ok=True)
    _, supernode_public = ensure_supernode_key(state_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    joined = join(args.coordinator, token, key, supernode_public.read_text())
    if joined.role != "member":
        raise JoinFailed(
            f"this token enrols {joined.role} {joined.subject}: use `collabfl admin login`"
        )
    write_private_key(key, tls / "member.key")
    write_bytes(tls / "member.pem", joined.certificate)
    write_bytes(tls / "ca.pem", joined.ca)
    write_bytes(state_dir / GRANT_KEY_FILE, joined.grant_key)
    peer_port = args.peer_listen.rpartition(":")[2]
    return [
        "--client-id", joined.subject,
        "--data", str(args.data.resolve()),
        "--state-dir", str(state_dir),
        "--superlink", args.coordinator,
        "--peer-listen", args.peer_listen,
        "--peer-address", f"{joined.hosts[0]}:{peer_port}",
        "--coordinator-key", str(state_dir / GRANT_KEY_FILE),
        "--coordinator-service", joined.service,
        "--root-certificates", str(tls / "ca.pem"),
        "--peer-cert", str(tls / "member.pem"),
        "--peer-key", str(tls / "member.key"),
    ]  # fmt: skip
