"""A fetch of a round the owner has not published yet waits for it, over real gRPC.

The owner's ClientApp publishes into the folder the peer server reads, from another process;
here another thread publishes once the server is seen waiting: ``WatchedModels`` notes every
server thread that finds the round missing but still to come, which is what waiting means.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import torch

from collabfl.client import daemon
from collabfl.client.model_store import DiskModelStore, PublishedModels
from collabfl.client.peer_client import GrpcPeerSource
from collabfl.client.peer_server import PeerModelServer
from collabfl.client.peers import PeerFetcher, PeerUnavailable
from collabfl.client.settings import ParticipantSettings, parser
from collabfl.client.stream_limits import StreamLimits
from collabfl.kernel.grants import GrantSigner, GrantVerifier, generate_private_key
from collabfl.proto import peer_pb2, peer_pb2_grpc

OWNER, ROUND, NUMEL = 3, 4, 1000
LAB_A, LAB_B = 0, 1
RUN = "run"
VECTOR = torch.arange(float(NUMEL))


class WatchedModels(PublishedModels):
    """Published models that record which server threads are waiting for a round."""

    def __init__(self, root: Path, owner: int) -> None:
        super().__init__(root, owner)
        self.waiting: set[int] = set()
        self.changed = threading.Condition()

    def for_serving(self, run: str) -> DiskModelStore | None:
        store = super().for_serving(run)
        if store is not None:
            awaits = store.awaits

            def watched(round_index: int) -> bool:
                pending = awaits(round_index)
                if pending:
                    with self.changed:
                        self.waiting.add(threading.get_ident())
                        self.changed.notify_all()
                return pending

            store.awaits = watched  # type: ignore[method-assign]
        return store

    def wait_for_waiters(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.waiting) >= count, timeout=10)


@pytest.fixture
def signer() -> GrantSigner:
    return GrantSigner(generate_private_key())


@pytest.fixture
def models(tmp_path) -> WatchedModels:
    models = WatchedModels(tmp_path, owner=OWNER)
    models.retire_other_runs(RUN)  # joining the run: nothing published yet
    return models


@pytest.fixture
def serve(models, signer) -> Iterator:
    servers: list[PeerModelServer] = []

    def start(**limits: float) -> str:
        verifier = GrantVerifier(signer.public_key_bytes())
        server = PeerModelServer(models, verifier, limits=StreamLimits(**limits))
        servers.append(server)
        return f"127.0.0.1:{server.start()}"

    yield start
    for server in servers:
        server.stop(None)


def fetch(
    address: str, grant: bytes, timeout_s: float = 10.0, run: str = RUN, launch: str = ""
) -> torch.Tensor:
    grants = {OWNER: grant}
    with GrpcPeerSource(
        {OWNER: address}, grants, NUMEL, 1 << 20, timeout_s, run=run, launch=launch
    ) as source:
        return source.fetch(OWNER, ROUND)


def publish_when_waited_for(models: WatchedModels, waiters: int = 1) -> threading.Thread:
    def publish() -> None:
        models.wait_for_waiters(waiters)
        models.for_publishing(RUN).publish(OWNER, ROUND, VECTOR)

    publisher = threading.Thread(target=publish)
    publisher.start()
    return publisher


def test_fetch_before_the_publish_gets_the_model_once_published(models, signer, serve):
    address = serve()
    publisher = publish_when_waited_for(models)
    assert torch.equal(fetch(address, signer.issue(RUN, LAB_A, OWNER, ROUND, 30)), VECTOR)
    publisher.join()
    assert models.waiting  # the fetch did wait for the publish


class PublishedDuringTheOpen(PublishedModels):
    """The owner publishes the round just after the server's first try to open it failed:
    the interleaving that made a waiting fetch fail with "no such round"."""

    def for_serving(self, run: str) -> DiskModelStore | None:
        store = super().for_serving(run)
        if store is not None:
            open_round = store.open_round

            def open_then_publish(round_index: int):  # type: ignore[no-untyped-def]
                try:
                    return open_round(round_index)
                except FileNotFoundError:
                    self.for_publishing(RUN).publish(OWNER, ROUND, VECTOR)
                    raise

            store.open_round = open_then_publish  # type: ignore[method-assign]
        return store


def test_a_round_published_between_a_failed_open_and_the_check_is_served(tmp_path, signer):
    models = PublishedDuringTheOpen(tmp_path, owner=OWNER)
    models.retire_other_runs(RUN)
    server = PeerModelServer(models, GrantVerifier(signer.public_key_bytes()))
    try:
        address = f"127.0.0.1:{server.start()}"
        assert torch.equal(fetch(address, signer.issue(RUN, LAB_A, OWNER, ROUND, 30)), VECTOR)
    finally:
        server.stop(None)


def test_never_published_round_fails_after_the_publish_wait(models, signer, serve):
    address = serve(publish_wait_s=0.2)
    grant = signer.issue(RUN, LAB_A, OWNER, ROUND, 30)
    with pytest.raises(PeerUnavailable, match=r"NOT_FOUND: round 4 was not published within 0.2 s"):
        fetch(address, grant)
    assert models.waiting


def test_the_wait_ends_at_the_callers_deadline_and_frees_the_slot(models, signer, serve):
    address = serve(publish_wait_s=600, streams_per_fetcher=1)
    grant = signer.issue(RUN, LAB_A, OWNER, ROUND, 30)
    with pytest.raises(PeerUnavailable, match=r"DEADLINE_EXCEEDED|not published within 0.\d+ s"):
        fetch(address, grant, timeout_s=0.5)
    models.for_publishing(RUN).publish(OWNER, ROUND, VECTOR)
    deadline = time.monotonic() + 10
    while True:  # the slot comes back as soon as the server ends the call (a moment after)
        try:
            assert torch.equal(fetch(address, grant), VECTOR)
            break
        except PeerUnavailable as error:
            assert "RESOURCE_EXHAUSTED" in str(error) and time.monotonic() < deadline


@pytest.mark.parametrize("case", ["bad-grant", "no-such-run", "past-round"])
def test_what_can_never_be_served_is_refused_without_waiting(models, signer, serve, case):
    models.for_publishing(RUN).publish(OWNER, ROUND + 1, VECTOR)
    address = serve(publish_wait_s=60)
    grant = signer.issue(RUN, LAB_A, OWNER, ROUND, 30)
    expected = {
        "bad-grant": ("PERMISSION_DENIED", {}),
        "no-such-run": ("NOT_FOUND: no such run", {"run": "other"}),
        "past-round": ("NOT_FOUND: no such round", {}),  # round 5 is out: 4 never comes
    }
    code, options = expected[case]
    if case == "bad-grant":
        grant = GrantSigner(generate_private_key()).issue(RUN, LAB_A, OWNER, ROUND, 30)
    if case == "no-such-run":
        grant = signer.issue("other", LAB_A, OWNER, ROUND, 30)
    with pytest.raises(PeerUnavailable, match=code):
        fetch(address, grant, timeout_s=5.0, **options)
    assert not models.waiting


def test_waiting_calls_hold_stream_slots(models, signer, serve):
    address = serve(publish_wait_s=60, streams_per_fetcher=2, max_streams=3)
    channel = grpc.insecure_channel(address)
    stub = peer_pb2_grpc.PeerModelsStub(channel)

    def call(fetcher: int) -> grpc.Call:
        grant = signer.issue(RUN, fetcher, OWNER, ROUND, 60)
        request = peer_pb2.FetchRequest(owner=OWNER, round=ROUND, grant=grant, run=RUN)
        return stub.FetchModel(request, timeout=30)

    def refused(fetcher: int) -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as error:
            next(call(fetcher))
        return error.value.code()

    try:
        parked = [call(LAB_A), call(LAB_A)]
        models.wait_for_waiters(2)
        assert refused(LAB_A) == grpc.StatusCode.RESOURCE_EXHAUSTED  # per fetcher
        parked.append(call(LAB_B))
        models.wait_for_waiters(3)
        assert refused(LAB_B) == grpc.StatusCode.RESOURCE_EXHAUSTED  # all fetchers together
        models.for_publishing(RUN).publish(OWNER, ROUND, VECTOR)
        payload = models.for_serving(RUN).path(ROUND).read_bytes()
        for waiting in parked:  # every parked call is served once the round is out
            assert b"".join(chunk.data for chunk in waiting) == payload
    finally:
        channel.close()


def test_a_batch_waits_for_all_its_owners_at_once(tmp_path, signer):
    """Each owner publishes only once every fetch of the batch is waiting: one at a time
    could never finish."""
    owners = [5, 6, 7]
    stores = {o: WatchedModels(tmp_path / str(o), owner=o) for o in owners}
    verifier = GrantVerifier(signer.public_key_bytes())
    servers = {o: PeerModelServer(stores[o], verifier) for o in owners}
    addresses = {o: f"127.0.0.1:{server.start()}" for o, server in servers.items()}
    grants = {o: signer.issue(RUN, LAB_A, o, ROUND, 30) for o in owners}
    for models in stores.values():
        models.retire_other_runs(RUN)

    def publish_once_all_wait() -> None:
        for models in stores.values():
            models.wait_for_waiters(1)
        for o in owners[::-1]:
            stores[o].for_publishing(RUN).publish(o, ROUND, torch.full((NUMEL,), float(o)))

    publisher = threading.Thread(target=publish_once_all_wait)
    publisher.start()
    try:
        with GrpcPeerSource(addresses, grants, NUMEL, 1 << 20, 20.0, run=RUN) as source:
            fetcher = PeerFetcher(source, expected_numel=NUMEL)
            with fetcher.hold(owners, ROUND, limit=3) as held:
                assert {o: float(v[0]) for o, v in held.items()} == {5: 5.0, 6: 6.0, 7: 7.0}
                assert list(held) == owners
    finally:
        publisher.join()
        for server in servers.values():
            server.stop(None)


def test_a_fetch_refused_for_want_of_a_slot_asks_again_until_one_frees(
    models, signer, serve, caplog
):
    """Every client fetches at once in a round: a popular owner serves them a few at a time,
    and the rest get their model as slots free up, not a skipped peer."""
    caplog.set_level(logging.INFO, logger="collabfl.client.peer_server")
    address = serve(publish_wait_s=60, streams_per_fetcher=1, max_streams=1)
    got: dict[int, torch.Tensor] = {}

    def fetch_as(fetcher: int) -> None:
        got[fetcher] = fetch(address, signer.issue(RUN, fetcher, OWNER, ROUND, 60), 30)

    first = threading.Thread(target=fetch_as, args=(LAB_A,))
    first.start()
    models.wait_for_waiters(1)  # the first fetch parks in the only slot
    second = threading.Thread(target=fetch_as, args=(LAB_B,))
    second.start()
    deadline = time.monotonic() + 20
    while "too many concurrent model streams" not in caplog.text:  # refused, asking again
        assert time.monotonic() < deadline and second.is_alive()
        time.sleep(0.01)
    models.for_publishing(RUN).publish(OWNER, ROUND, VECTOR)
    first.join()
    second.join()
    assert torch.equal(got[LAB_A], VECTOR) and torch.equal(got[LAB_B], VECTOR)
    busy = [r for r in caplog.records if "too many concurrent model streams" in r.getMessage()]
    assert busy and all(r.levelno == logging.INFO for r in busy)  # back-pressure, no warning


def test_the_daemon_sets_the_publish_wait(tmp_path):
    required = ["--client-id", "0", "--data", "d.npz", "--state-dir", str(tmp_path)]
    required += ["--superlink", "127.0.0.1:9092", "--peer-address", "localhost:9200"]
    required += ["--coordinator-key", "grant.pub"]
    args = parser().parse_args([*required, "--peer-publish-wait", "2.5"])
    assert daemon.stream_limits(ParticipantSettings.from_flags(args)).publish_wait_s == 2.5
    default = ParticipantSettings.from_flags(parser().parse_args(required))
    assert daemon.stream_limits(default).publish_wait_s == StreamLimits.publish_wait_s


def test_a_wait_ends_when_the_owner_joins_another_launch_of_the_run(models, signer, serve):
    """After a coordinator restart the run is launched anew and resumes from its last
    completed round: a fetch still waiting for a round of the launch before must not hold
    its fetcher (whose executor the new launch's set-up queues behind) for the publish wait."""
    models.begin_launch(RUN, "1001")
    address = serve(publish_wait_s=600.0)

    def relaunch() -> None:
        models.wait_for_waiters(1)
        models.begin_launch(RUN, "2002")

    owner = threading.Thread(target=relaunch)
    owner.start()
    grant = signer.issue(RUN, LAB_A, OWNER, ROUND, 30)
    with pytest.raises(PeerUnavailable, match=r"ABORTED: .*\(2002, not 1001\)"):
        fetch(address, grant, timeout_s=60.0, launch="1001")
    owner.join()


def test_a_fetch_from_a_launch_the_owner_already_left_is_not_waited_for(models, signer, serve):
    models.begin_launch(RUN, "2002")  # relaunched before this fetch of the old launch began
    address = serve(publish_wait_s=600.0)
    grant = signer.issue(RUN, LAB_A, OWNER, ROUND, 30)
    with pytest.raises(PeerUnavailable, match=r"ABORTED: .*\(2002, not 1001\)"):
        fetch(address, grant, timeout_s=60.0, launch="1001")


def test_a_fetch_of_the_owners_launch_waits_through_a_rejoin(models, signer, serve):
    """A client daemon restarted mid-run joins the same launch again (admitted late)."""
    models.begin_launch(RUN, "1001")
    address = serve()

    def rejoin_then_publish() -> None:
        models.wait_for_waiters(1)
        models.begin_launch(RUN, "1001")
        models.for_publishing(RUN).publish(OWNER, ROUND, VECTOR)

    owner = threading.Thread(target=rejoin_then_publish)
    owner.start()
    grant = signer.issue(RUN, LAB_A, OWNER, ROUND, 30)
    assert torch.equal(fetch(address, grant, launch="1001"), VECTOR)
    owner.join()
