"""The peer link over TLS and mutual TLS, with certificates made on the fly."""

from __future__ import annotations

import datetime
import ipaddress

import pytest
import torch
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from collabfl.client.model_store import DiskModelStore
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import PeerModelServer
from collabfl.client.peers import PeerUnavailable
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.kernel.tls import ClientTLS, ServerTLS

OWNER, ROUND, NUMEL = 1, 0, 1000


class Authority:
    """A throwaway CA that signs leaf certificates for 127.0.0.1 / localhost."""

    def __init__(self, name: str = "collabfl test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            self._builder(subject, self.key.public_key())
            .issuer_name(subject)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str) -> tuple[bytes, bytes]:
        """(certificate PEM, private key PEM) of a new leaf."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        cert = (
            self._builder(subject, key.public_key())
            .issuer_name(self.cert.subject)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    @staticmethod
    def _builder(subject: x509.Name, public_key) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
        )


@pytest.fixture(scope="module")
def ca() -> Authority:
    return Authority()


@pytest.fixture
def vector() -> torch.Tensor:
    return torch.randn(NUMEL)


@pytest.fixture
def serve(tmp_path, vector):
    signer = GrantSigner(generate_private_key())
    store = DiskModelStore(tmp_path, owner=OWNER)
    store.publish(OWNER, ROUND, vector)
    servers = []

    def start(tls: ServerTLS) -> tuple[str, bytes]:
        server = PeerModelServer(store, GrantVerifier(signer.public_key_bytes()), tls=tls)
        servers.append(server)
        grant = signer.issue("run", fetcher=0, owner=OWNER, round=ROUND, ttl_s=30)
        return f"127.0.0.1:{server.start()}", grant

    yield start
    for server in servers:
        server.stop(None)


def fetch(address: str, grant: bytes, tls: ClientTLS | None) -> torch.Tensor:
    with GrpcPeerSource({OWNER: address}, {OWNER: grant}, NUMEL, 1 << 20, 5.0, tls) as source:
        return source.fetch(OWNER, ROUND)


def test_tls_round_trip(ca, serve, vector):
    address, grant = serve(ServerTLS(*ca.issue("peer-1")))
    assert torch.equal(fetch(address, grant, ClientTLS(ca.pem)), vector)


def test_tls_refuses_an_untrusted_server_and_plaintext(ca, serve):
    address, grant = serve(ServerTLS(*ca.issue("peer-1")))
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, ClientTLS(Authority("another CA").pem))
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, None)


def test_mutual_tls_needs_a_client_certificate(ca, serve, vector):
    address, grant = serve(ServerTLS(*ca.issue("peer-1"), client_ca=ca.pem))
    assert torch.equal(fetch(address, grant, ClientTLS(ca.pem, *ca.issue("peer-0"))), vector)
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, ClientTLS(ca.pem))
    stranger = Authority("stranger CA")
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, ClientTLS(ca.pem, *stranger.issue("peer-0")))


def test_client_tls_needs_both_cert_and_key(ca):
    cert, _ = ca.issue("peer-0")
    with pytest.raises(ValueError, match="private key"):
        ClientTLS(ca.pem, cert_chain=cert)
