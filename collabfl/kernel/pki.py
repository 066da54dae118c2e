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
    return key, _certificate(identity, hosts, key.public_key(), ca_key, ca_cert, days)


def _certificate(
    identity: Identity,
    hosts: list[str],
    public_key: ec.EllipticCurvePublicKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    days: int,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    names = [_host_name(host) for host in hosts]
    names.append(x509.UniformResourceIdentifier(identity.uri()))
    return (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0] if hosts else str(identity)))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
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


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted: the file's mode is its protection."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_private_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    """PKCS#8 PEM, mode 0600 even if the file existed with wider permissions."""
    write_bytes(path, private_key_pem(key))


def write_certificate(cert: x509.Certificate, path: Path) -> None:
    write_bytes(path, cert.public_bytes(serialization.Encoding.PEM), shared=True)


def load_ca(folder: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The CA in ``folder`` (``ca.key``, ``ca.pem``), to issue more certificates."""
    return load_ca_files(folder / "ca.key", folder / "ca.pem")


def load_ca_files(
    key_path: Path, cert_path: Path
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A CA's private key and certificate, from their PEM files."""
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path} is not an EC private key")
    return key, x509.load_pem_x509_certificate(cert_path.read_bytes())


def fingerprint(cert_pem: bytes) -> str:
    """SHA-256 of the certificate's DER form, hex: what a member table pins."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.fingerprint(hashes.SHA256()).hex()


def make_csr(key: ec.EllipticCurvePrivateKey, common_name: str) -> bytes:
    """A PEM certificate signing request for ``key``: all it proves is holding the key.

    The issuer decides every other field (identity, host names, lifetime) from the join
    token, never from what the request asks for.
    """
    csr = x509.CertificateSigningRequestBuilder().subject_name(_name(common_name))
    return csr.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def issue_for_csr(
    csr_pem: bytes,
    identity: Identity,
    hosts: list[str],
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    days: int = 365,
) -> x509.Certificate:
    """A certificate for the key in ``csr_pem`` naming ``identity`` and ``hosts``.

    ValueError when the request is malformed or its signature does not verify (the sender
    does not hold the key it asks a certificate for).
    """
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError as error:
        raise ValueError(f"not a PEM certificate signing request: {error}") from None
    if not csr.is_signature_valid:
        raise ValueError("the certificate signing request's signature does not verify")
    public_key = csr.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        raise ValueError("the certificate signing request must carry an EC public key")
    return _certificate(identity, hosts, public_key, ca_key, ca_cert, days)


def ca_pin(ca_pem: bytes) -> str:
    """``sha256:<hex>`` of the CA certificate's public key (SubjectPublicKeyInfo, DER): what a
    join token pins, as kubeadm's discovery hash does."""
    cert = x509.load_pem_x509_certificate(ca_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    digest = hashes.Hash(hashes.SHA256())
    digest.update(spki)
    return "sha256:" + digest.finalize().hex()
