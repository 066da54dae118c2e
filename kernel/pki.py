"""Issue the federation's certificates: one CA, and a certificate per identity.

Each certificate carries its holder's host (DNS name or IP address, so TLS can verify the
server side) and its collabfl identity URI (``collabfl.kernel.identity``), so one
certificate serves both as a server certificate and as a client certificate for mutual
TLS. Private keys are written readable by their owner only. For production an
organisation's own CA can issue the same fields; this is for labs and tests.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from collabfl.kernel.atomic import write_bytes
from collabfl.kernel.identity import Identity

CA_NAME = "collabfl federation CA"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _host_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_ca(days: int = 365) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(CA_NAME))
        .issuer_name(_name(CA_NAME))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue(
    identity: Identity,
    hosts: list[str],
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    days: int = 365,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and certificate for ``identity``, valid for TLS as ``hosts`` (may be empty)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names = [_host_name(host) for host in hosts]
    names.append(x509.UniformResourceIdentifier(identity.uri()))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0] if hosts else str(identity)))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def write_private_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    """PKCS#8 PEM, mode 0600 even if the file existed with wider permissions."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_bytes(path, pem, private=True)


def write_certificate(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def load_ca(folder: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The CA in ``folder`` (``ca.key``, ``ca.pem``), to issue more certificates."""
    key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{folder / 'ca.key'} is not an EC private key")
    return key, x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())


def fingerprint(cert_pem: bytes) -> str:
    """SHA-256 of the certificate's DER form, hex: what a member table pins."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.fingerprint(hashes.SHA256()).hex()
