"""Make TLS material for a federation: one CA, a certificate per host.

    python deploy/make_tls.py --out tls --host coordinator.example.org --host client-0.lab ...

Writes ``ca.pem`` (give it to every machine), and ``<host>.pem`` + ``<host>.key`` per host
(keys are mode 0600). Certificates carry the host as DNS name (or IP address) so gRPC can
verify them. For production, prefer your organisation's CA; this is for labs and tests.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)


def make_ca(days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("collabfl federation CA"))
        .issuer_name(_name("collabfl federation CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_host_cert(
    host: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, days: int
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate for ``host`` usable as both server and client (mutual TLS)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_san(host)]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [x509.ExtendedKeyUsageOID.SERVER_AUTH, x509.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--host", action="append", required=True, help="repeat per machine")
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = make_ca(args.days)
    (args.out / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca_key, args.out / "ca.key")
    for host in args.host:
        key, cert = make_host_cert(host, ca_key, ca_cert, args.days)
        (args.out / f"{host}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, args.out / f"{host}.key")
    print(f"wrote CA and {len(args.host)} host certificates to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
