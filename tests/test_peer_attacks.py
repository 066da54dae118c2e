"""Attacks on a member's peer server over real mutual TLS on loopback, each refused.

Every member holds a certificate naming ``collabfl://member/<id>``; the server reads the
caller's identity from the TLS session and binds each grant to it, to its run and round.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
import torch
from flwr.common.config import parse_config_args

from collabfl.apps.client_app import NodeSettings, _peer_source
from collabfl.client import daemon
from collabfl.client.model_store import PublishedModels
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import PeerModelServer
from collabfl.client.peers import InvalidPeerModel, PeerFetcher, PeerUnavailable
from collabfl.client.settings import ParticipantSettings, parser
from collabfl.client.stream_limits import StreamLimits
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.kernel.tls import ClientTLS, ServerTLS
from collabfl.proto import peer_pb2, peer_pb2_grpc
from collabfl.strategies.verbs import Collaborate
from tests.support.client_data import write_client_data
from tests.support.pki import Credential, TestCA

OWNER, LAB_A, LAB_B, ROUND, NUMEL = 2, 0, 1, 3, 1000
RUN_A, RUN_B = "run-a", "run-b"


@pytest.fixture(scope="module")
def ca() -> TestCA:
    return TestCA()


@pytest.fixture
def signer() -> GrantSigner:
    return GrantSigner(generate_private_key())


@pytest.fixture
def published(tmp_path) -> PublishedModels:
    return PublishedModels(tmp_path / "published", owner=OWNER)


@pytest.fixture
def serve(ca, signer, published):
    """Start the owner's peer server over mutual TLS; returns its address."""
    servers: list[PeerModelServer] = []

    def start(limits: StreamLimits | None = None) -> str:
        owner = ca.member(OWNER)
        tls = ServerTLS(owner.cert, owner.key, ca.cert_pem)
        verifier = GrantVerifier(signer.public_key_bytes())
        server = PeerModelServer(published, verifier, tls=tls, limits=limits)
        servers.append(server)
        return f"localhost:{server.start()}"

    yield start
    for server in servers:
        server.stop(None)


def tls_of(ca: TestCA, credential: Credential) -> ClientTLS:
    return ClientTLS(ca.cert_pem, credential.cert, credential.key)


def fetch(address: str, grant: bytes, tls: ClientTLS, run: str = RUN_A, numel: int = NUMEL):
    with GrpcPeerSource({OWNER: address}, {OWNER: grant}, numel, 1 << 26, 10.0, tls, run=run) as s:
        return s.fetch(OWNER, ROUND)


def test_lab_a_cannot_use_lab_bs_grant(ca, signer, published, serve):
    vector = torch.randn(NUMEL)
    published.for_publishing(RUN_A).publish(OWNER, ROUND, vector)
    address = serve()
    grant_of_b = signer.issue(RUN_A, LAB_B, OWNER, ROUND, ttl_s=30)
    with pytest.raises(PeerUnavailable, match=r"PERMISSION_DENIED: .*fetcher 1, not caller 0"):
        fetch(address, grant_of_b, tls_of(ca, ca.member(LAB_A)))
    assert torch.equal(fetch(address, grant_of_b, tls_of(ca, ca.member(LAB_B))), vector)


def test_grant_from_run_a_is_refused_in_run_b(ca, signer, published, serve):
    for run in (RUN_A, RUN_B):
        published.for_publishing(run).publish(OWNER, ROUND, torch.randn(NUMEL))
    address = serve()
    grant = signer.issue(RUN_A, LAB_A, OWNER, ROUND, ttl_s=30)
    with pytest.raises(PeerUnavailable, match=r"PERMISSION_DENIED: .*for run 'run-a'"):
        fetch(address, grant, tls_of(ca, ca.member(LAB_A)), run=RUN_B)


def test_non_member_certificate_cannot_fetch_even_with_a_grant(ca, signer, published, serve):
    published.for_publishing(RUN_A).publish(OWNER, ROUND, torch.randn(NUMEL))
    address = serve()
    grant = signer.issue(RUN_A, LAB_A, OWNER, ROUND, ttl_s=30)
    for credential in (ca.operator(), ca.coordinator()):
        with pytest.raises(PeerUnavailable, match="PERMISSION_DENIED: a member certificate"):
            fetch(address, grant, tls_of(ca, credential))


def health(address: str, tls: ClientTLS, run: str = RUN_A) -> peer_pb2.HealthReply:
    with grpc.secure_channel(address, tls.credentials()) as channel:
        stub = peer_pb2_grpc.PeerModelsStub(channel)
        return stub.Health(peer_pb2.HealthRequest(run=run), timeout=5)


def test_health_reveals_the_latest_round_only_to_members(ca, published, serve):
    published.for_publishing(RUN_A).publish(OWNER, ROUND, torch.randn(NUMEL))
    address = serve()
    operator = health(address, tls_of(ca, ca.operator()))
    assert (operator.owner, operator.status) == (OWNER, "SERVING")
    assert not operator.HasField("latest_round")
    assert health(address, tls_of(ca, ca.member(LAB_A))).latest_round == ROUND
    assert not health(address, tls_of(ca, ca.member(LAB_A)), run=RUN_B).HasField("latest_round")


def test_a_second_run_keeps_its_early_rounds(ca, signer, published, serve):
    run_a = published.for_publishing(RUN_A)
    for round_index in range(20):
        run_a.publish(OWNER, round_index, torch.randn(NUMEL))
    early = torch.randn(NUMEL)
    published.for_publishing(RUN_B).publish(OWNER, 0, early)
    assert run_a.rounds() == [17, 18, 19]  # each run is pruned on its own
    address = serve()
    grant = signer.issue(RUN_B, LAB_A, OWNER, 0, ttl_s=30)
    with GrpcPeerSource(
        {OWNER: address}, {OWNER: grant}, NUMEL, 1 << 20, 10.0, tls_of(ca, ca.member(0)), run=RUN_B
    ) as source:
        assert torch.equal(source.fetch(OWNER, 0), early)


def test_a_new_run_retires_the_old_runs_models(published):
    published.for_publishing(RUN_A).publish(OWNER, ROUND, torch.randn(NUMEL))
    published.for_publishing(RUN_B).publish(OWNER, 0, torch.randn(NUMEL))
    published.retire_other_runs(RUN_B)
    assert published.for_serving(RUN_A) is None
    assert published.for_serving(RUN_B).rounds() == [0]
    assert published.for_serving("../escape") is None


def test_stalled_streams_of_one_member_do_not_block_another(ca, signer, published, serve):
    big = 5_000_000  # 20 MB: far more than a stalled reader's flow-control window
    published.for_publishing(RUN_A).publish(OWNER, ROUND, torch.randn(big))
    address = serve(StreamLimits(send_timeout_s=1.0, streams_per_fetcher=2, max_streams=6))
    stalled_grant = signer.issue(RUN_A, LAB_A, OWNER, ROUND, ttl_s=60)
    attacker = grpc.secure_channel(
        address, tls_of(ca, ca.member(LAB_A)).credentials(), [("grpc.http2.bdp_probe", 0)]
    )
    request = peer_pb2.FetchRequest(owner=OWNER, round=ROUND, grant=stalled_grant, run=RUN_A)
    calls, refused = [], []
    for _ in range(8):
        call = peer_pb2_grpc.PeerModelsStub(attacker).FetchModel(request, timeout=60)
        try:
            next(call)  # the stream is admitted and serving; now never read again
            calls.append(call)
        except grpc.RpcError as error:
            refused.append(error.code())
    try:
        assert len(calls) == 2
        assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 6
        started = time.monotonic()
        other = signer.issue(RUN_A, LAB_B, OWNER, ROUND, ttl_s=60)
        assert fetch(address, other, tls_of(ca, ca.member(LAB_B)), numel=big).numel() == big
        assert time.monotonic() - started < 5
        time.sleep(3)  # past the send deadline: the stalled streams were cut
        assert fetch(address, stalled_grant, tls_of(ca, ca.member(LAB_A)), numel=big).numel() == big
    finally:
        for call in calls:
            call.cancel()
        attacker.close()


def test_model_altered_at_rest_into_finite_values_is_not_served(
    ca, signer, published, serve, caplog
):
    store = published.for_publishing(RUN_A)
    store.publish(OWNER, ROUND, torch.randn(NUMEL))
    path = store.path(ROUND)
    stat = path.stat()
    with path.open("r+b") as file:
        file.seek(-4, os.SEEK_END)
        file.write(torch.tensor([0.5]).numpy().tobytes())  # a finite, plausible weight
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    address = serve()
    grant = signer.issue(RUN_A, LAB_A, OWNER, ROUND, ttl_s=30)
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(InvalidPeerModel, match=r"DATA_LOSS: .*differs from the one recorded"),
    ):
        fetch(address, grant, tls_of(ca, ca.member(LAB_A)))
    assert f"client {OWNER} refused FetchModel of round {ROUND}" in caplog.text


def test_huge_finite_weights_skip_the_peer(ca, signer, published, serve):
    published.for_publishing(RUN_A).publish(OWNER, ROUND, torch.full((NUMEL,), 3e38))
    address = serve()
    grant = signer.issue(RUN_A, LAB_A, OWNER, ROUND, ttl_s=30)
    tls = tls_of(ca, ca.member(LAB_A))
    with GrpcPeerSource(
        {OWNER: address}, {OWNER: grant}, NUMEL, 1 << 20, 10.0, tls, run=RUN_A
    ) as s:
        fetcher = PeerFetcher(s, NUMEL)
        with fetcher.hold([OWNER], ROUND, limit=1) as models:
            assert models == {}
    assert fetcher.take_skipped() == [
        f"peer {OWNER}: peer {OWNER} sent a weight of magnitude 3e+38, above the limit of 10000"
    ]


def daemon_args(tmp_path: Path, ca: TestCA, client_id: int, certificate_of: int) -> list[str]:
    """A TLS daemon's arguments, with a valid data file and key file behind them."""
    write_client_data(tmp_path / "data.npz")
    (tmp_path / "grant.pub").write_bytes(b"")
    ca_path = ca.write_ca(tmp_path)
    cert, key = ca.member(certificate_of).write(tmp_path, "member")
    return [
        "--client-id",
        str(client_id),
        "--data",
        str(tmp_path / "data.npz"),
        "--state-dir",
        str(tmp_path / "state"),
        "--superlink",
        "127.0.0.1:9092",
        "--peer-address",
        "localhost:9200",
        "--coordinator-key",
        str(tmp_path / "grant.pub"),
        "--root-certificates",
        str(ca_path),
        "--peer-cert",
        str(cert),
        "--peer-key",
        str(key),
    ]


def test_fetcher_presents_this_members_certificate(tmp_path, ca, signer, published, serve):
    """The node config the daemon gives its SuperNode makes the ClientApp fetch over mTLS."""
    vector = torch.randn(NUMEL)
    published.for_publishing(RUN_A).publish(OWNER, ROUND, vector)
    address = serve()
    settings = participant(daemon_args(tmp_path, ca, LAB_A, LAB_A))
    command = daemon.supernode_command(settings)
    node_config = parse_config_args([command[command.index("--node-config") + 1]])
    settings = NodeSettings.from_context(SimpleNamespace(node_config=node_config))
    grant = signer.issue(RUN_A, LAB_A, OWNER, ROUND, ttl_s=30)
    task = Collaborate("none", (OWNER,), (1.0,), peer_addresses=(address,), peer_grants=(grant,))
    with _peer_source(task, NUMEL, settings, RUN_A, launch="7") as source:
        assert torch.equal(source.fetch(OWNER, ROUND), vector)


def test_daemon_refuses_a_certificate_of_another_member(tmp_path, ca):
    settings = participant(daemon_args(tmp_path, ca, LAB_A, LAB_B))
    with pytest.raises(ValueError, match="names member 1, not member 0"):
        daemon.check_settings(settings)


def participant(argv: list[str]) -> ParticipantSettings:
    return ParticipantSettings.from_flags(parser().parse_args(argv))
