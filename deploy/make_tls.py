"""Make a federation's certificates: one CA and a certificate per identity.

    python deploy/make_tls.py --out tls --coordinator coord.example.org \\
        --operator alice --member 0=lab-a.example.org --member 1=lab-b.example.org

Writes ``ca.pem`` (give it to every machine; ``ca.key`` stays with whoever issues),
``coordinator.pem/.key``, ``operator-<name>.pem/.key`` and ``member-<id>.pem/.key`` (keys
mode 0600). A folder that already holds a CA is reused, so the same command adds a member
or issues a fresh certificate for a compromised one (then pin it with
``collabfl admin members rotate``). Each certificate names its holder's role; the
coordinator service and peer servers authorise by that role, not by host name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from collabfl.kernel.identity import Identity, Role
from collabfl.kernel.pki import issue, load_ca, make_ca, write_certificate, write_private_key


def _member(text: str) -> tuple[int, str]:
    client_id, sep, host = text.partition("=")
    if not sep or not client_id.isdigit() or not host:
        raise argparse.ArgumentTypeError(f"--member takes ID=HOST, got {text!r}")
    return int(client_id), host


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--coordinator", metavar="HOST", help="the coordinator's host name")
    parser.add_argument("--operator", action="append", default=[], metavar="NAME")
    parser.add_argument("--member", action="append", default=[], type=_member, metavar="ID=HOST")
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if (args.out / "ca.key").exists():
        ca_key, ca_cert = load_ca(args.out)
    else:
        ca_key, ca_cert = make_ca(args.days)
        write_certificate(ca_cert, args.out / "ca.pem")
        write_private_key(ca_key, args.out / "ca.key")
    wanted: list[tuple[str, Identity, list[str]]] = []
    if args.coordinator:
        hosts = [args.coordinator, "127.0.0.1", "localhost"]
        wanted.append(("coordinator", Identity(Role.COORDINATOR, args.coordinator), hosts))
    for name in args.operator:
        wanted.append((f"operator-{name}", Identity(Role.OPERATOR, name), []))
    for client_id, host in args.member:
        wanted.append((f"member-{client_id}", Identity.member(client_id), [host]))
    for stem, identity, hosts in wanted:
        key, cert = issue(identity, hosts, ca_key, ca_cert, args.days)
        write_certificate(cert, args.out / f"{stem}.pem")
        write_private_key(key, args.out / f"{stem}.key")
    print(f"wrote {len(wanted)} certificates to {args.out} (CA: {args.out / 'ca.pem'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
