"""Enrolment by join token, over the real HTTPS endpoint of a Fleet gateway.

Each test starts the coordinator's public gateway (uvicorn, TLS with a coordinator
certificate from a CA made in STATE/pki) with the enrolment endpoint, and joins with the
participant's real client code (kernel/join_client.py). Flower's SuperLink is replaced by a
registry that records the SuperNode keys it is asked to register; everything else is what
a coordinator runs.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
import types
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import torch
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from collabfl.client.model_store import PublishedModels
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import PeerModelServer
from collabfl.client.peers import PeerUnavailable
from collabfl.client.revocations import RevocationPoller
from collabfl.coordinator.enrolment.coordinator_pki import CoordinatorTLSFiles, ensure_pki
from collabfl.coordinator.enrolment.enrolment import Enroller, JoinThrottle, SuperNodeRegistry
from collabfl.coordinator.gateway.fleet_gateway import FleetGateway, GatewayTLS
from collabfl.coordinator.gateway.join_endpoint import JoinEndpoint
from collabfl.coordinator.store.enrolment_store import EnrolmentStore
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.kernel.identity import Identity, Role, identity_of_certificate
from collabfl.kernel.join_client import JoinFailed, join
from collabfl.kernel.join_token import TokenParts
from collabfl.kernel.pki import private_key_pem
from collabfl.kernel.revocation import DENIED, serial_hex
from collabfl.kernel.tickets import RunEnd
from collabfl.kernel.tls import ClientTLS, ServerTLS

SUPERNODE_KEY = (
    ec.generate_private_key(ec.SECP384R1())
    .public_key()
    .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    .decode()
)


@dataclass
class FakeSuperLink:
    """Stands in for ``flwr supernode register/unregister``: node ids from 100 up."""

    registered: dict[int, str] = field(default_factory=dict)
    unregistered: list[int] = field(default_factory=list)

    def registry(self) -> SuperNodeRegistry:
        return SuperNodeRegistry(self.register, self.unregistered.append)

    def register(self, key: str) -> int:
        node_id = 100 + len(self.registered)
        self.registered[node_id] = key
        return node_id


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


REMEDY = "ask the operator for a new invite: `collabfl admin invite --client-id {}`"


@dataclass
class Coordinator:
    enroller: Enroller
    state: CoordinatorState
    superlink: FakeSuperLink
    clock: Clock
    address: str
    files: CoordinatorTLSFiles
    db: Path

    def invite(self, client_id: int, host: str = "127.0.0.1", ttl_s: float = 3600.0) -> str:
        return self.enroller.invite(Role.MEMBER, str(client_id), [host], ttl_s).token

    def events(self, kind: str) -> list[str]:
        return [e.message for e in self.state.events() if e.kind == kind]


def _start(
    folder: Path,
    throttle: JoinThrottle | None = None,
    ended_runs: Callable[[CoordinatorState], Callable[[], Mapping[str, RunEnd]]] | None = None,
) -> Iterator[Coordinator]:
    """``ended_runs``: what the gateway publishes as ended runs, given the state."""
    files = ensure_pki(folder / "pki", ["localhost"])
    state = CoordinatorState(folder / "coordinator.db")
    superlink, clock = FakeSuperLink(), Clock()
    grant_key = b"-----BEGIN PUBLIC KEY-----\ngrant\n-----END PUBLIC KEY-----\n"
    enroller = Enroller(
        files, EnrolmentStore(folder / "coordinator.db"), state, superlink.registry(),
        grant_key, "localhost:9300", "localhost:0", throttle=throttle, clock=clock,
    )  # fmt: skip
    gateway = FleetGateway(
        "127.0.0.1", 0, "http://127.0.0.1:9", None, GatewayTLS(files.cert, files.key),
        enrolment=JoinEndpoint(enroller, dict if ended_runs is None else ended_runs(state)),
    )  # fmt: skip
    port = gateway.start()
    try:
        yield Coordinator(enroller, state, superlink, clock, f"localhost:{port}", files,
                          folder / "coordinator.db")  # fmt: skip
    finally:
        gateway.stop()
        state.close()
        DENIED.replace(())


@pytest.fixture
def coordinator(tmp_path) -> Iterator[Coordinator]:
    yield from _start(tmp_path / "coordinator")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def test_a_member_joins_with_its_token_and_keeps_its_keys(coordinator):
    key = _key()
    joined = join(coordinator.address, coordinator.invite(3, "lab-c.example.org"), key,
                  SUPERNODE_KEY)  # fmt: skip
    cert = x509.load_pem_x509_certificate(joined.certificate)
    assert identity_of_certificate(cert) == Identity.member(3)
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["lab-c.example.org"]
    assert joined.ca == coordinator.files.ca.read_bytes()
    assert joined.service == "localhost:9300"
    # Its SuperNode was registered and bound to client 3 before it ever started.
    assert list(coordinator.superlink.registered.values()) == [SUPERNODE_KEY]
    assert coordinator.state.supernode_bindings() == {100: 3}
    [enrolled] = coordinator.enroller.store.enrolments("member")
    assert (enrolled.subject, enrolled.host) == ("3", "lab-c.example.org")
    [spent] = [t for t in coordinator.enroller.store.tokens() if t.used_at is not None]
    assert coordinator.events("joined") == [f"member 3 joined with token {spent.token_id}"]


def test_the_database_holds_no_token_secret(coordinator):
    token = coordinator.invite(0)
    secret = TokenParts.parse(token).secret
    coordinator.state.close()  # flush the WAL into the file
    CoordinatorState(coordinator.db).close()
    stored = b"".join(p.read_bytes() for p in coordinator.db.parent.glob("coordinator.db*"))
    assert TokenParts.parse(token).token_id.encode() in stored
    assert secret.encode() not in stored


def test_a_replayed_token_is_refused_and_recorded(coordinator):
    token = coordinator.invite(0)
    join(coordinator.address, token, _key(), SUPERNODE_KEY)
    with pytest.raises(JoinFailed, match=r"\(403\).*already used") as refused:
        join(coordinator.address, token, _key(), SUPERNODE_KEY)
    assert REMEDY.format(0) in str(refused.value)
    assert len(coordinator.superlink.registered) == 1
    assert any("already used" in m for m in coordinator.events("join_refused"))


def test_an_expired_token_is_refused(coordinator):
    token = coordinator.invite(0, ttl_s=60)
    coordinator.clock.now += 61
    with pytest.raises(JoinFailed, match="has expired") as refused:
        join(coordinator.address, token, _key(), SUPERNODE_KEY)
    assert REMEDY.format(0) in str(refused.value)
    assert coordinator.superlink.registered == {}


def test_a_revoked_member_hears_revoked_and_the_remedy(coordinator, caplog):
    """Its token left unspent says it was void by the revocation; its daemon, which learns
    the deny list, logs once that it was revoked and how to come back (issue #42, 7)."""
    joined = join(coordinator.address, coordinator.invite(4), _key(), SUPERNODE_KEY)
    spare = coordinator.invite(4)  # unspent when the member is revoked
    serial = serial_hex(x509.load_pem_x509_certificate(joined.certificate))
    poller = RevocationPoller(coordinator.address, coordinator.files.ca, own=(4, serial))
    poller.refresh()
    assert not poller.revoked
    coordinator.enroller.revoke(Role.MEMBER, "4")
    with caplog.at_level(logging.ERROR, logger="collabfl.client.revocations"):
        poller.refresh()
        poller.refresh()
    assert poller.revoked
    [said] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "client 4 was revoked" in said and REMEDY.format(4) in said
    with pytest.raises(JoinFailed, match="member 4 was revoked") as refused:
        join(coordinator.address, spare, _key(), SUPERNODE_KEY)
    assert REMEDY.format(4) in str(refused.value)


def test_a_token_enrols_only_the_identity_it_was_minted_for(coordinator):
    """Another client id's token gives that client's certificate, whatever the CSR asks;
    a token whose id is changed to another token's is unknown (its secret does not match)."""
    key = _key()
    token_for_1 = coordinator.invite(1)
    token_for_2 = TokenParts.parse(coordinator.invite(2))
    forged = TokenParts(token_for_2.token_id, TokenParts.parse(token_for_1).secret,
                        token_for_2.pin).text()  # fmt: skip
    with pytest.raises(JoinFailed, match="unknown join token"):
        join(coordinator.address, forged, key, SUPERNODE_KEY)
    joined = join(coordinator.address, token_for_1, key, SUPERNODE_KEY)
    cert = x509.load_pem_x509_certificate(joined.certificate)
    assert identity_of_certificate(cert) == Identity.member(1)


def test_a_fake_coordinator_with_another_ca_gets_nothing(coordinator, tmp_path):
    """The token pins the genuine CA: a join that dials an impostor stops before sending."""
    impostor_gen = _start(tmp_path / "impostor")  # a whole coordinator of another CA
    impostor = next(impostor_gen)
    try:
        with pytest.raises(JoinFailed, match="not the one the token pins"):
            join(impostor.address, coordinator.invite(0), _key(), SUPERNODE_KEY)
        assert impostor.events("join_refused") == []  # it never saw the token
        assert impostor.enroller.store.enrolments() == []
    finally:
        impostor_gen.close()


def test_a_bad_request_leaves_the_token_unspent(coordinator):
    token = coordinator.invite(0)
    with pytest.raises(JoinFailed, match="OpenSSH"):
        join(coordinator.address, token, _key(), "not a key")
    join(coordinator.address, token, _key(), SUPERNODE_KEY)  # still good


def test_oversized_and_malformed_bodies_are_refused(coordinator):
    url = f"https://{coordinator.address}/collabfl/v1/join"
    context = ssl.create_default_context(cafile=str(coordinator.files.ca))
    assert _post(url, b"x" * (65 * 1024), context) == 413
    assert _post(url, b"{not json", context) == 400
    assert _post(url, b"[" * 30_000 + b"]" * 30_000, context) == 400  # nested past the stack
    assert _post(url.replace("/join", "/anything"), b"{}", context) == 404


def _post(url: str, body: bytes, context: ssl.SSLContext) -> int:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_failed_attempts_are_throttled_per_address(tmp_path):
    throttle = JoinThrottle(max_failures=3, window_s=60)
    generator = _start(tmp_path / "coordinator", throttle)
    coordinator = next(generator)
    try:
        good = coordinator.invite(0)
        bad = TokenParts(TokenParts.parse(good).token_id, "A" * 22, TokenParts.parse(good).pin)
        for _ in range(3):
            with pytest.raises(JoinFailed, match=r"\(403\)"):
                join(coordinator.address, bad.text(), _key(), SUPERNODE_KEY)
        with pytest.raises(JoinFailed, match=r"\(429\).*too many failed"):
            join(coordinator.address, good, _key(), SUPERNODE_KEY)
        coordinator.clock.now += 61
        join(coordinator.address, good, _key(), SUPERNODE_KEY)
    finally:
        generator.close()


def test_revoked_member_is_refused_by_peers_and_can_enrol_again(coordinator, tmp_path):
    """After ``revoke``, a peer server (which learns the list from the coordinator's public
    port) refuses the member's certificate; its SuperNode is unregistered; a fresh token
    enrols it again with a new certificate that is accepted."""
    fetcher_key = _key()
    fetcher = join(coordinator.address, coordinator.invite(0), fetcher_key, SUPERNODE_KEY)
    owner_key = _key()
    owner = join(coordinator.address, coordinator.invite(1), owner_key, SUPERNODE_KEY)
    signer = GrantSigner(generate_private_key())
    published = PublishedModels(tmp_path / "published", owner=1)
    published.for_publishing("run").publish(1, 0, torch.ones(10))
    server = PeerModelServer(
        published, GrantVerifier(signer.public_key_bytes()),
        tls=ServerTLS(owner.certificate, private_key_pem(owner_key), client_ca=owner.ca),
    )  # fmt: skip
    address = f"127.0.0.1:{server.start()}"
    poller = RevocationPoller(coordinator.address, coordinator.files.ca)

    def fetch(cert: bytes, key: ec.EllipticCurvePrivateKey) -> torch.Tensor:
        grant = signer.issue("run", fetcher=0, owner=1, round=0, ttl_s=30)
        tls = ClientTLS(fetcher.ca, cert, private_key_pem(key))
        with GrpcPeerSource({1: address}, {1: grant}, 10, 1 << 20, 5.0, tls, run="run") as src:
            return src.fetch(1, 0)

    try:
        assert torch.equal(fetch(fetcher.certificate, fetcher_key), torch.ones(10))
        revoked = coordinator.enroller.revoke(Role.MEMBER, "0")
        assert coordinator.superlink.unregistered == [100]
        assert 0 not in coordinator.state.supernode_bindings().values()
        DENIED.replace(())  # as a client daemon's process starts: it knows nothing yet
        poller.refresh()
        assert len(DENIED) == 1
        with pytest.raises(PeerUnavailable, match="PERMISSION_DENIED"):
            fetch(fetcher.certificate, fetcher_key)
        new_key = _key()
        again = join(coordinator.address, coordinator.invite(0), new_key, SUPERNODE_KEY)
        assert x509.load_pem_x509_certificate(again.certificate).serial_number != int(
            revoked.cert_serial, 16
        )
        assert torch.equal(fetch(again.certificate, new_key), torch.ones(10))
    finally:
        server.stop(None)


def test_revoked_member_is_refused_by_the_coordinator_service(coordinator):
    from collabfl.coordinator.service import serve
    from collabfl.proto import substeps_pb2, substeps_pb2_grpc

    key = _key()
    member = join(coordinator.address, coordinator.invite(0), key, SUPERNODE_KEY)
    tls = ServerTLS(coordinator.files.cert.read_bytes(), coordinator.files.key.read_bytes(),
                    client_ca=coordinator.files.ca.read_bytes())  # fmt: skip
    server, port = serve(coordinator.state, GrantSigner(generate_private_key()),
                         "127.0.0.1:0", tls)  # fmt: skip

    def poll() -> grpc.StatusCode:
        credentials = ClientTLS(member.ca, member.certificate, private_key_pem(key)).credentials()
        with grpc.secure_channel(f"localhost:{port}", credentials) as channel:
            stub = substeps_pb2_grpc.SubstepsStub(channel)
            try:
                stub.Poll(substeps_pb2.PollRequest(run_id="r", client_id=0), timeout=10)
            except grpc.RpcError as error:
                return error.code()
        return grpc.StatusCode.OK

    try:
        before = poll()
        assert before not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE)
        coordinator.enroller.revoke(Role.MEMBER, "0")
        assert poll() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop(None)


def test_the_ca_endpoint_serves_the_pinned_ca(coordinator):
    context = ssl.create_default_context(cafile=str(coordinator.files.ca))
    url = f"https://{coordinator.address}/collabfl/v1/ca"
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        assert response.read() == coordinator.files.ca.read_bytes()
    url = f"https://{coordinator.address}/collabfl/v1/revoked"
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        assert json.loads(response.read()) == {"serials": [], "ended_runs": {}}


def test_invitations_are_checked(coordinator):
    with pytest.raises(ValueError, match="needs --host"):
        coordinator.enroller.invite(Role.MEMBER, "0", [])
    with pytest.raises(ValueError, match="client id"):
        coordinator.enroller.invite(Role.MEMBER, "01", ["h"])
    with pytest.raises(ValueError, match="operator name"):
        coordinator.enroller.invite(Role.OPERATOR, "Bob Smith", [])
    with pytest.raises(ValueError, match="lifetime"):
        coordinator.enroller.invite(Role.MEMBER, "0", ["h"], ttl_s=0)


def test_a_join_waits_for_an_unreachable_coordinator_for_ever_saying_when_and_what_to_do(
    monkeypatch, closed_port
):
    """Past the old 5-minute give-up (on a fake clock, a quarter of an hour: three times
    it), each line stamped with the time and the fix; only the operator's Ctrl-C ends it."""
    from collabfl.kernel import join_client

    clock = [0.0]
    lines: list[str] = []

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] > 900:
            raise KeyboardInterrupt

    # A fake clock for join_client alone: patching the time module itself would stop the
    # clock of every other thread in this worker (pytest-timeout's among them).
    fake_time = types.SimpleNamespace(
        monotonic=lambda: clock[0], sleep=sleep, strftime=time.strftime
    )
    monkeypatch.setattr(join_client, "time", fake_time)
    with pytest.raises(KeyboardInterrupt):
        token = TokenParts("0123abcd", "s" * 32, "sha256:" + "0" * 64).text()
        join(f"127.0.0.1:{closed_port}", token, _key(), SUPERNODE_KEY, say=lines.append)
    assert len(lines) > 55  # a quarter of an hour of asking at most every 15 s
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d cannot reach", line) for line in lines)
    assert "check the address" in lines[-1] and "Ctrl-C stops" in lines[-1]
