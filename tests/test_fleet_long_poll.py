"""The Fleet gateway holds a SuperNode's empty pull until a message is there, and its pull
of an object until the object's content is there.

A real gateway (uvicorn, httpx) is put in front of a real HTTP upstream standing in for the
SuperLink's Fleet API, whose pull answers empty until the test queues a message. A pull made
before the message exists must come back with it (the gateway asked again), a pull with
nothing to get comes back empty when the hold ends, and other calls are forwarded once. An
object pull answered "not there yet" is asked again until the content is there.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from flwr.proto.fleet_pb2 import PullMessagesResponse, PushMessagesResponse
from flwr.proto.message_pb2 import Message as MessageProto
from flwr.proto.message_pb2 import PullObjectResponse, PushObjectRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.gateway.fleet_gateway import (
    PROTOBUF,
    PULL_OBJECT_PATH,
    PULL_PATH,
    PUSH_OBJECT_PATH,
    PUSH_PATH,
    FleetGateway,
    LongPoll,
    ReplyContent,
)


class FakeFleet:
    """Counts calls; a pull answers the queued message once, else an empty answer."""

    def __init__(self) -> None:
        self.pulls = 0
        self.other_calls = 0
        self.queued: PullMessagesResponse | None = None
        self.refusing = False
        self.object_asks = 0
        self.object_after = 0
        """The object pull answers "not there yet" until asked more than this often."""
        self.object_known = True
        self.objects_to_push: list[str] = []
        """What a push's answer says the SuperLink still needs of the message."""
        self.lock = threading.Lock()

    async def pull(self, request: Request) -> Response:
        with self.lock:
            self.pulls += 1
            if self.refusing:  # as the SuperLink answers a SuperNode it does not know
                return Response(b"", status_code=401)
            answer, self.queued = self.queued or PullMessagesResponse(), None
        return Response(answer.SerializeToString(), media_type=PROTOBUF)

    async def pull_object(self, request: Request) -> Response:
        with self.lock:
            self.object_asks += 1
            there = self.object_asks > self.object_after
        answer = PullObjectResponse(
            object_found=self.object_known,
            object_available=self.object_known and there,
            object_content=b"content" if self.object_known and there else b"",
        )
        return Response(answer.SerializeToString(), media_type=PROTOBUF)

    async def push(self, request: Request) -> Response:
        if self.refusing:
            return Response(b"", status_code=401)
        answer = PushMessagesResponse(objects_to_push=self.objects_to_push)
        return Response(answer.SerializeToString(), media_type=PROTOBUF)

    async def other(self, request: Request) -> Response:
        with self.lock:
            self.other_calls += 1
        return Response(b"", media_type=PROTOBUF)

    def queue(self, message_id: str) -> None:
        answer = PullMessagesResponse(messages_list=[MessageProto()])
        answer.messages_list[0].metadata.message_id = message_id
        with self.lock:
            self.queued = answer


def _serve(app) -> tuple[uvicorn.Server, int]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, server.servers[0].sockets[0].getsockname()[1]


@pytest.fixture
def fleet() -> Iterator[FakeFleet]:
    yield FakeFleet()


def _gateway(
    fleet: FakeFleet, long_poll: LongPoll, activity: FleetActivity | None = None
) -> Iterator[str]:
    routes = [
        Route(PULL_PATH, fleet.pull, methods=["POST"]),
        Route(PULL_OBJECT_PATH, fleet.pull_object, methods=["POST"]),
        Route(PUSH_PATH, fleet.push, methods=["POST"]),
        Route(PUSH_OBJECT_PATH, fleet.other, methods=["POST"]),
        Route("/v1/fleet/send-node-heartbeat", fleet.other, methods=["POST"]),
    ]
    upstream, upstream_port = _serve(Starlette(routes=routes))
    object_wait = LongPoll(hold_s=long_poll.hold_s, first_s=0.005, max_s=0.02)
    gateway = FleetGateway(
        "127.0.0.1",
        0,
        f"http://127.0.0.1:{upstream_port}",
        None,
        None,
        long_poll,
        object_wait,
        activity,
    )
    port = gateway.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        gateway.stop()
        upstream.should_exit = True


@pytest.fixture
def held(fleet: FakeFleet) -> Iterator[str]:
    yield from _gateway(fleet, LongPoll(hold_s=60.0, first_s=0.01, max_s=0.05))


@pytest.fixture
def short_hold(fleet: FakeFleet) -> Iterator[str]:
    yield from _gateway(fleet, LongPoll(hold_s=0.5, first_s=0.01, max_s=0.05))


def _pull(base: str) -> PullMessagesResponse:
    response = httpx.post(base + PULL_PATH, content=b"", timeout=120)
    response.raise_for_status()
    return PullMessagesResponse.FromString(response.content)


def test_a_pull_made_before_the_message_exists_returns_it(fleet, held):
    answer: list[PullMessagesResponse] = []
    puller = threading.Thread(target=lambda: answer.append(_pull(held)))
    puller.start()
    while fleet.pulls < 3:  # the gateway is asking again: the pull is being held
        time.sleep(0.01)
    fleet.queue("m-1")
    puller.join(timeout=60)
    assert not puller.is_alive()
    assert [m.metadata.message_id for m in answer[0].messages_list] == ["m-1"]


def test_a_pull_with_nothing_to_get_ends_empty_when_the_hold_ends(fleet, short_hold):
    assert not _pull(short_hold).messages_list
    assert fleet.pulls > 1


def test_a_pull_that_finds_a_message_is_not_asked_again(fleet, held):
    fleet.queue("m-2")
    assert [m.metadata.message_id for m in _pull(held).messages_list] == ["m-2"]
    assert fleet.pulls == 1


def test_a_refused_pull_is_answered_at_once(fleet, held):
    fleet.refusing = True
    response = httpx.post(held + PULL_PATH, content=b"", timeout=30)
    assert response.status_code == 401 and fleet.pulls == 1


def test_other_fleet_calls_are_forwarded_once(fleet, held):
    response = httpx.post(held + "/v1/fleet/send-node-heartbeat", content=b"", timeout=30)
    assert response.status_code == 200 and fleet.other_calls == 1 and fleet.pulls == 0


@pytest.fixture
def activity() -> FleetActivity:
    return FleetActivity()


@pytest.fixture
def rung(fleet: FakeFleet, activity: FleetActivity) -> Iterator[str]:
    """A gateway whose held pulls ask again only every 30 s, unless the doorbell rings."""
    yield from _gateway(fleet, LongPoll(hold_s=60.0, first_s=30.0, max_s=30.0), activity)


def test_a_held_pull_asks_again_when_the_server_app_says_it_pushed(fleet, activity, rung):
    answer: list[PullMessagesResponse] = []
    puller = threading.Thread(target=lambda: answer.append(_pull(rung)))
    puller.start()
    while fleet.pulls < 1:  # asked once, found nothing: now held for 30 s
        time.sleep(0.01)
    fleet.queue("m-3")
    activity.messages.ring()
    puller.join(timeout=20)  # well before the 30 s interval: the ring woke it
    assert not puller.is_alive()
    assert [m.metadata.message_id for m in answer[0].messages_list] == ["m-3"]
    assert fleet.pulls == 2


def test_a_supernodes_pushed_reply_rings_the_replies_doorbell(fleet, activity, rung):
    httpx.post(rung + PUSH_PATH, content=b"", timeout=30).raise_for_status()
    assert activity.replies.count == 1
    fleet.refusing = True  # a push the SuperLink refuses brings nothing to pull
    assert httpx.post(rung + PUSH_PATH, content=b"", timeout=30).status_code == 401
    assert activity.replies.count == 1


def test_a_reply_rings_the_replies_doorbell_once_its_objects_are_all_pushed(fleet, activity, rung):
    """Rung at the message, the ServerApp would pull it before its content and ask the
    SuperLink for each missing object again."""
    fleet.objects_to_push = ["obj-a", "obj-b"]
    httpx.post(rung + PUSH_PATH, content=b"", timeout=30).raise_for_status()
    for object_id, rings in (("obj-a", 0), ("unrelated", 0), ("obj-b", 1)):
        body = PushObjectRequest(object_id=object_id, object_content=b"x").SerializeToString()
        httpx.post(rung + PUSH_OBJECT_PATH, content=body, timeout=30).raise_for_status()
        assert activity.replies.count == rings, object_id


def test_a_reply_left_incomplete_is_rung_when_too_many_wait():
    """A SuperNode that died mid-push leaves its reply waiting; past the bound the oldest is
    rung (its puller finds out) and forgotten, so waiting replies never grow unbounded."""
    rings: list[int] = []
    content = ReplyContent(lambda: rings.append(1), limit=2)
    content.message_pushed(["a"])
    content.message_pushed(["b", "c"])
    assert not rings
    content.message_pushed(["d"])  # the first is dropped and rung
    assert len(rings) == 1
    content.object_pushed("a")  # forgotten: no second ring for it
    content.object_pushed("b")
    content.object_pushed("c")
    assert len(rings) == 2
    content.object_pushed("d")
    assert len(rings) == 3 and not content.waiting()


def _pull_object(base: str) -> PullObjectResponse:
    response = httpx.post(base + PULL_OBJECT_PATH, content=b"", timeout=120)
    response.raise_for_status()
    return PullObjectResponse.FromString(response.content)


def test_an_object_pulled_before_its_content_is_there_comes_back_with_it(fleet, held):
    fleet.object_after = 5  # the sender is still pushing: five answers of "not there yet"
    answer = _pull_object(held)
    assert answer.object_available and answer.object_content == b"content"
    assert fleet.object_asks == 6


def test_an_unknown_object_is_answered_at_once(fleet, held):
    fleet.object_known = False
    assert not _pull_object(held).object_found
    assert fleet.object_asks == 1


def test_an_object_that_never_comes_is_answered_not_there_when_the_hold_ends(fleet, short_hold):
    fleet.object_after = 10**9
    answer = _pull_object(short_hold)
    assert answer.object_found and not answer.object_available
    assert fleet.object_asks > 1


def test_long_poll_intervals_grow_to_their_cap_and_fill_the_hold():
    waits = LongPoll(hold_s=2.0, first_s=0.02, max_s=0.25, growth=1.5).intervals()
    assert waits[0] == 0.02 and max(waits) == 0.25
    assert all(a <= b for a, b in itertools.pairwise(waits))
    assert 2.0 <= sum(waits) < 2.0 + 0.25


def test_the_pull_the_gateway_holds_is_flowers_fleet_pull():
    """The long poll keys on this flwr's Fleet route and answer; an upgrade that renames
    either would quietly bring back the SuperNode's 3 s sleep after every empty pull."""
    from flwr.superlink.routers.fleet.router import router

    routes = {(route.path, method) for route in router.routes for method in route.methods}
    assert (PULL_PATH, "POST") in routes and (PULL_OBJECT_PATH, "POST") in routes
    assert "messages_list" in PullMessagesResponse.DESCRIPTOR.fields_by_name
    fields = PullObjectResponse.DESCRIPTOR.fields_by_name
    assert {"object_found", "object_available", "object_content"} <= set(fields)


def test_an_idle_held_pull_asks_the_superlink_a_few_times_per_hold():
    """What an idle node costs the SuperLink: the asks of one default hold (benchmarks/
    coordinator_cpu.py measured an idle 4-node federation's SuperLink at 54 ms of CPU a
    second, most of it these re-asks). A message is not delayed by them: the ``messages``
    doorbell wakes a held pull at once."""
    policy = LongPoll()
    asks = 1 + len(policy.intervals())
    assert asks <= 6, f"{asks} asks per {policy.hold_s} s hold"
    assert policy.max_s <= 5.0  # a lost doorbell still costs a few seconds at most


def test_the_reply_the_gateway_follows_is_flowers_fleet_push():
    """``ReplyContent`` rings when the objects a push's answer names have all been pushed; an
    upgrade that renames the route or either field would leave every reply to the
    ServerApp's one-second fallback wait."""
    from flwr.superlink.routers.fleet.router import router

    routes = {(route.path, method) for route in router.routes for method in route.methods}
    assert (PUSH_PATH, "POST") in routes and (PUSH_OBJECT_PATH, "POST") in routes
    assert "objects_to_push" in PushMessagesResponse.DESCRIPTOR.fields_by_name
    assert "object_id" in PushObjectRequest.DESCRIPTOR.fields_by_name
