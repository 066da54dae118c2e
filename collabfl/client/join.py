"""``COLLABFL_JOIN_TOKEN=T collabfl-client join COORDINATOR --data FILE --state-dir DIR``:
enrol this machine with a join token, then run the daemon.

The token never comes on the command line (kernel/token_source.py says why). The keys are
made here and never leave: a fresh TLS key (its certificate comes back from the
coordinator, kernel/join_client.py) and a fresh SuperNode key (the coordinator registers its
public half before the SuperNode first starts). What comes back is written to ``DIR/tls``
and the daemon's settings to ``DIR`` (kernel/daemon_settings.py), so a restart is
``collabfl-client --state-dir DIR``. Flags after the join's own go to the daemon as they
are (``--device cuda:1``, ``--runtime subprocess``, ...).

An operator re-runs the printed join line after a reboot. On a state dir already enrolled
that replaced the SuperNode key, then the spent token was refused: the lab was locked out
until a fresh invite. So a join there changes nothing, says how to start the daemon and
exits 2 (nothing ran: the command, not the machine, was wrong); ``--re-enrol`` spends a new
token there. Either way the new keys are made in ``DIR/.enrolling`` and take the old ones'
places only once the coordinator accepted them: a refused join leaves every file as it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from collabfl.client.data.client_file import load_client_file
from collabfl.client.data.opening import DataRef, data_ref
from collabfl.flower.supernode_key import PRIVATE_NAME, PUBLIC_NAME, ensure_supernode_key
from collabfl.kernel import exit_status
from collabfl.kernel.atomic import keep_private, sync_folder, write_bytes
from collabfl.kernel.daemon_help import daemon_parser
from collabfl.kernel.daemon_settings import save
from collabfl.kernel.identity import identity_of_certificate
from collabfl.kernel.join_client import JoinFailed, NotYet, coordinator_address, join
from collabfl.kernel.pki import write_private_key
from collabfl.kernel.token_source import ENV_VAR, ON_ARGV, read_token
from collabfl.kernel.user_code import (
    UserCodeError,
    check_allowed,
    check_findable,
    parse_allowed,
)

DESCRIPTION = f"""Enrol this machine in a federation with the join token its operator sent, then run
the participant (`collabfl-client`).

The token comes from the environment ({ENV_VAR}) or --token-file, never
from the command line, where other local users could read it. The keys are made on this
machine and never leave it. The certificate and the participant's options are saved under
--state-dir, so `collabfl-client --state-dir DIR` starts it again later. On a state dir
already enrolled it changes nothing and exits 2 (add --re-enrol to spend a new token there).
Options after the join's own go to the participant as they are (e.g. --device cuda)."""
EXAMPLE = (
    f"{ENV_VAR}=cfj1.… collabfl-client join coord.example.org:9093 "
    "--data /data/client-0.npz --state-dir /var/lib/collabfl-client"
)

TLS_DIR = "tls"
CERT_FILE = "member.pem"
GRANT_KEY_FILE = "grant_key.pub.pem"
STAGING_DIR = ".enrolling"
"""Where an enrolment's new keys wait until the coordinator accepted them."""
INSTALLED = [
    (PRIVATE_NAME, ""),
    (PUBLIC_NAME, ""),
    ("member.key", TLS_DIR),
    ("ca.pem", TLS_DIR),
    (GRANT_KEY_FILE, ""),
    (CERT_FILE, TLS_DIR),
]
"""What an accepted enrolment moves from ``STAGING_DIR`` into place (file, folder under the
state dir); the certificate last, as it is what marks the state dir enrolled."""
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
    p.add_argument(
        "--data",
        type=data_ref,
        required=True,
        help="this participant's data file, or pkg.mod:factory, its own loader (with "
        "--allow-import pkg.mod:factory)",
    )
    p.add_argument(
        "--allow-import",
        action="append",
        default=[],
        metavar="PKG.MOD:ATTR",
        help="user code the participant may import (its data factory, a model factory); "
        "repeat for each; saved for the daemon",
    )
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
    p.add_argument(
        "--re-enrol",
        action="store_true",
        help="enrol a state dir that is enrolled already, with a new token (after `collabfl "
        "admin revoke`); its keys are replaced only if the coordinator accepts the join",
    )
    return p


def main(argv: list[str]) -> int:
    args, daemon_flags = parser().parse_known_args(argv)
    if args.token is not None:
        print(f"collabfl-client join: {ON_ARGV}", file=sys.stderr)
        return exit_status.USAGE
    restart = f"collabfl-client --state-dir {args.state_dir}"
    try:
        client_id = enrolled_as(args.state_dir)
        if client_id is not None and not args.re_enrol:
            print(f"collabfl-client join: already enrolled as client {client_id}; start it "
                  f"with `{restart}` (nothing changed; --re-enrol spends a new token here)",
                  file=sys.stderr)  # fmt: skip
            return exit_status.USAGE
        token = read_token(args.token_file)
        check_join_data(args.data, args.allow_import)  # before the token is spent
        coordinator_address(args.coordinator)
        keep_private(args.state_dir)
        daemon_argv = enrol(args, token)
    except (JoinFailed, ValueError, FileNotFoundError) as error:
        print(f"collabfl-client join: {error}", file=sys.stderr)
        return exit_status.FAILURE if isinstance(error, NotYet) else exit_status.USAGE
    from collabfl.client import daemon  # the daemon's imports, only once enrolled

    if args.no_start:
        from collabfl.client.settings import ParticipantSettings
        from collabfl.client.settings import parser as daemon_flags_parser

        flags = daemon_flags_parser().parse_args([*daemon_argv, *daemon_flags])
        save(ParticipantSettings.from_flags(flags))
        print(f"collabfl-client: enrolled; start it with `{restart}`", flush=True)
        return exit_status.OK
    print(f"collabfl-client: enrolled; restart it later with `{restart}`", flush=True)
    return daemon.main([*daemon_argv, *daemon_flags])


def check_join_data(data: DataRef, allow_import: list[str]) -> None:
    """A data file that loads, or a factory the participant allows and could import (as
    everything it allows); ValueError saying what ``--data`` takes otherwise. The factory
    is called for its client id only when the daemon starts (the id comes with the join),
    where a wrong split is refused by name."""
    allowed = parse_allowed(allow_import)
    try:
        check_findable(allowed)  # the daemon would refuse to start with it
    except UserCodeError as error:
        raise UserCodeError(f"{error} (nothing was sent: the token is unspent)") from None
    if isinstance(data, str):
        check_allowed(data, allowed)
        return
    if not data.exists():
        raise FileNotFoundError(
            f"--data {data}: no such file; give this lab's data file (.npz; `collabfl "
            "federation prepare` makes demo ones, client-K.npz) or its own loader, --data "
            "pkg.mod:factory --allow-import pkg.mod:factory (nothing was sent: the token is "
            "unspent)"
        )
    load_client_file(data)


def enrolled_as(state_dir: Path) -> str | None:
    """The client id ``state_dir`` is enrolled as (its certificate's), or None; ValueError
    naming the file when it holds no member certificate."""
    path = state_dir / TLS_DIR / CERT_FILE
    try:
        pem = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return identity_of_certificate(x509.load_pem_x509_certificate(pem)).name
    except ValueError as error:
        raise ValueError(f"{path} is not a member certificate ({error}): move it away") from None


def enrol(args: argparse.Namespace, token: str) -> list[str]:
    """Spend the token; put what came back in place; the daemon's command line (without
    extras). The new keys wait in ``STAGING_DIR`` until the coordinator accepted them."""
    state_dir: Path = args.state_dir.resolve()
    tls = state_dir / TLS_DIR
    staging = state_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)  # an enrolment that a crash interrupted
    staging.mkdir(mode=0o700)
    try:
        _, supernode_public = ensure_supernode_key(staging)
        key = ec.generate_private_key(ec.SECP256R1())
        joined = join(args.coordinator, token, key, supernode_public.read_text())
        if joined.role != "member":
            raise JoinFailed(
                f"this token enrols {joined.role} {joined.subject}: use `collabfl admin login`"
            )
        write_private_key(key, staging / "member.key")
        write_bytes(staging / CERT_FILE, joined.certificate)
        write_bytes(staging / "ca.pem", joined.ca)
        write_bytes(staging / GRANT_KEY_FILE, joined.grant_key)
        tls.mkdir(mode=0o700, exist_ok=True)
        for name, folder in INSTALLED:
            os.replace(staging / name, state_dir / folder / name)
        sync_folder(tls)
        sync_folder(state_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    peer_port = args.peer_listen.rpartition(":")[2]
    return [
        "--client-id", joined.subject,
        "--data", str(args.data.resolve() if isinstance(args.data, Path) else args.data),
        *(flag for path in args.allow_import for flag in ("--allow-import", path)),
        "--state-dir", str(state_dir),
        "--superlink", args.coordinator,
        "--peer-listen", args.peer_listen,
        "--peer-address", f"{joined.hosts[0]}:{peer_port}",
        "--coordinator-key", str(state_dir / GRANT_KEY_FILE),
        "--coordinator-service", joined.service,
        "--root-certificates", str(tls / "ca.pem"),
        "--peer-cert", str(tls / CERT_FILE),
        "--peer-key", str(tls / "member.key"),
    ]  # fmt: skip
