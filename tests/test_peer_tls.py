"""The peer link over mutual TLS, with certificates made on the fly."""

from __future__ import annotations

import pytest
import torch

from collabfl.client.model_store import PublishedModels
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import PeerModelServer
from collabfl.client.peers import PeerUnavailable
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.kernel.tls import ClientTLS, ServerTLS
from tests.support.pki import TestCA

OWNER, FETCHER, ROUND, NUMEL = 1, 0, 0, 1000
RUN = "run"


@pytest.fixture(scope="module")
def ca() -> TestCA:
    return TestCA()


@pytest.fixture
def vector() -> torch.Tensor:
    return torch.randn(NUMEL)


@pytest.fixture
def serve(tmp_path, vector):
    signer = GrantSigner(generate_private_key())
    published = PublishedModels(tmp_path, owner=OWNER)
    published.for_publishing(RUN).publish(OWNER, ROUND, vector)
    servers = []

    def start(tls: ServerTLS) -> tuple[str, bytes]:
        server = PeerModelServer(published, GrantVerifier(signer.public_key_bytes()), tls=tls)
        servers.append(server)
        grant = signer.issue(RUN, fetcher=FETCHER, owner=OWNER, round=ROUND, ttl_s=30)
        return f"127.0.0.1:{server.start()}", grant

    yield start
    for server in servers:
        server.stop(None)


def server_tls(ca: TestCA) -> ServerTLS:
    owner = ca.member(OWNER)
    return ServerTLS(owner.cert, owner.key, client_ca=ca.cert_pem)


def member_tls(ca: TestCA, trusted: TestCA | None = None) -> ClientTLS:
    """The fetcher's credential from ``ca``, trusting servers of ``trusted`` (default ``ca``)."""
    fetcher = ca.member(FETCHER)
    return ClientTLS((trusted or ca).cert_pem, fetcher.cert, fetcher.key)


def fetch(address: str, grant: bytes, tls: ClientTLS | None) -> torch.Tensor:
    with GrpcPeerSource(
        {OWNER: address}, {OWNER: grant}, NUMEL, 1 << 20, 5.0, tls, run=RUN
    ) as source:
        return source.fetch(OWNER, ROUND)


def test_tls_round_trip(ca, serve, vector):
    address, grant = serve(server_tls(ca))
    assert torch.equal(fetch(address, grant, member_tls(ca)), vector)


def test_tls_refuses_an_untrusted_server_and_plaintext(ca, serve):
    address, grant = serve(server_tls(ca))
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, member_tls(ca, trusted=TestCA()))
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, None)


def test_mutual_tls_needs_a_client_certificate(ca, serve, vector):
    address, grant = serve(server_tls(ca))
    assert torch.equal(fetch(address, grant, member_tls(ca)), vector)
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, ClientTLS(ca.cert_pem))
    stranger = TestCA().member(FETCHER)
    with pytest.raises(PeerUnavailable, match="UNAVAILABLE"):
        fetch(address, grant, ClientTLS(ca.cert_pem, stranger.cert, stranger.key))


def test_peer_server_refuses_tls_without_client_certificates(ca, tmp_path):
    owner = ca.member(OWNER)
    with pytest.raises(ValueError, match="mutual TLS"):
        PeerModelServer(
            PublishedModels(tmp_path, OWNER), None, tls=ServerTLS(owner.cert, owner.key)
        )


def test_client_tls_needs_both_cert_and_key(ca):
    with pytest.raises(ValueError, match="private key"):
        ClientTLS(ca.cert_pem, cert_chain=ca.member(FETCHER).cert)
