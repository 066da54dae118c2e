"""The sub-step relay: its seats (no sockets), then the service over real gRPC, with and
without TLS, including what a member or a stale ServerApp may not do, and a client's seat
loop (``apps.substeps.serve_seat``) against it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import flwr.superlink.grid.http_grid  # noqa: F401  (see below)
import grpc
import pytest
import torch
from flwr.app import RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.supercore.inflatable.inflatable_utils import ObjectPullError
from flwr.supercore.task_identity import TaskIdentity
from support.coordinator import FakeSigner, valid_request
from support.pki import TestCA

from collabfl.apps import exchange, substeps
from collabfl.apps.fleet_signals import Polling
from collabfl.apps.substeps import (
    RelayedSteps,
    Served,
    decode_seat,
    decode_served,
    encode_served,
    serve_seat,
)
from collabfl.coordinator.relay import substep_client
from collabfl.coordinator.relay.substep_client import SeatPoller, SessionFeeder
from collabfl.coordinator.relay.substep_relay import (
    Relayed,
    SeatRefused,
    StepResult,
    SubstepRelay,
    UnknownSession,
    Work,
)
from collabfl.coordinator.service import serve
from collabfl.coordinator.service_client import CoordinatorError
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.flower.codec import (
    content_bytes,
    content_from_bytes,
    decode_reply,
    encode_instruction,
)
from collabfl.flower.reply_pull import lost_content, node_gone, pull_replies
from collabfl.kernel.tls import ClientTLS, ServerTLS
from collabfl.strategies.metrics import ClientMetrics
from collabfl.strategies.protocol import Instruction, Reply
from collabfl.strategies.verbs import Discriminate, Evaluate

# flwr.superlink.grid.http_grid is imported above because reply_pull imports it on its first
# pull (0.7 s on a quiet machine, seconds on a loaded one). A ServerApp pulls long before it
# relays, but here the first pull is in the relay's wait, and the stall outlasted a 2 s
# seat's idle limit: the seat gave up.
TOKENS = {0: b"a" * 32, 1: b"b" * 32}
NODE_UNAVAILABLE = ErrorCode.NODE_UNAVAILABLE
BUDGET = 1 << 20


def test_a_step_goes_out_on_a_poll_and_its_result_comes_back_on_the_next() -> None:
    relay = SubstepRelay()
    relay.open("r", "s", TOKENS)
    with ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(relay.relay, "r", "s", {0: b"work"}, {}, 30.0, BUDGET)
        work = relay.poll("r", "s", 0, TOKENS[0], 0, None, 30.0)
        assert work == Work(1, b"work")
        # The poll's reply was lost: asking again gives the same step, not a new one.
        assert relay.poll("r", "s", 0, TOKENS[0], 0, None, 30.0) == Work(1, b"work")
        follow = pool.submit(relay.poll, "r", "s", 0, TOKENS[0], 1, StepResult(b"done"), 30.0)
        assert waiting.result() == Relayed({0: 1}, {0: StepResult(b"done")})
        relay.close("r")
        assert follow.result() == Work(closed=True)
    assert relay.poll("r", "s", 0, TOKENS[0], 1, None, 30.0) == Work(closed=True)


def test_a_late_result_is_dropped_and_a_silent_client_times_out() -> None:
    relay = SubstepRelay()
    relay.open("r", "s", TOKENS)
    assert relay.relay("r", "s", {1: b"first"}, {}, 0.05, BUDGET) == Relayed({1: 1}, {})
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(relay.relay, "r", "s", {1: b"second"}, {}, 30.0, BUDGET)
        assert relay.poll("r", "s", 1, TOKENS[1], 0, None, 30.0) == Work(2, b"second")
        # The answer to step 1 arrives after step 2 went out: it must not count for step 2.
        relay.poll("r", "s", 1, TOKENS[1], 1, StepResult(b"late"), 0.0)
        relay.poll("r", "s", 1, TOKENS[1], 2, StepResult(b"on time"), 0.0)
        assert second.result() == Relayed({1: 2}, {1: StepResult(b"on time")})


def test_one_call_hands_every_seat_its_step_and_returns_when_all_answered() -> None:
    relay = SubstepRelay()
    relay.open("r", "s", TOKENS)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(relay.relay, "r", "s", {0: b"w0", 1: b"w1"}, {}, 30.0, BUDGET)
        assert relay.poll("r", "s", 0, TOKENS[0], 0, None, 30.0) == Work(1, b"w0")
        assert relay.poll("r", "s", 1, TOKENS[1], 0, None, 30.0) == Work(1, b"w1")
        relay.poll("r", "s", 0, TOKENS[0], 1, StepResult(b"r0"), 0.0)
        time.sleep(0.05)  # one answer of two: the call must still be waiting
        assert not waiting.done()
        relay.poll("r", "s", 1, TOKENS[1], 1, StepResult(error="boom"), 0.0)
        assert waiting.result() == Relayed(
            {0: 1, 1: 1}, {0: StepResult(b"r0"), 1: StepResult(error="boom")}
        )


def test_results_beyond_the_byte_budget_wait_for_the_next_call() -> None:
    relay = SubstepRelay()
    relay.open("r", "s", TOKENS)
    relay.relay("r", "s", {0: b"w0", 1: b"w1"}, {}, 0.0, BUDGET)
    for client in (0, 1):
        relay.poll("r", "s", client, TOKENS[client], 1, StepResult(b"x" * 10), 0.0)
    first = relay.relay("r", "s", {}, {0: 1, 1: 1}, 30.0, max_bytes=15)
    assert first == Relayed({0: 1, 1: 1}, {0: StepResult(b"x" * 10)})
    # Asked again for the one left, it comes at once: it was answered already.
    assert relay.relay("r", "s", {}, {1: 1}, 30.0, 15).results == {1: StepResult(b"x" * 10)}


def test_the_serverapp_splits_steps_larger_than_one_request(
    state: CoordinatorState, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request stays within what the service admits; each seat still gets its step."""
    monkeypatch.setattr(substep_client, "MAX_STEP_BYTES", 100)
    sizes = {0: 60, 1: 30, 2: 80}
    assert [
        sorted(b) for b in substep_client._batches({k: b"x" * n for k, n in sizes.items()}, 100)
    ] == [[0, 1], [2]]
    tokens = {k: bytes([65 + k]) * 32 for k in sizes}
    with SessionFeeder(address, "r", state.new_launch("r")) as feeder:
        feeder.open("s", tokens)
        relayed = feeder.relay("s", {k: b"x" * n for k, n in sizes.items()}, {}, 0.0)
        assert relayed == Relayed({0: 1, 1: 1, 2: 1}, {})
        for k, n in sizes.items():
            with SeatPoller(address, "r", "s", k, tokens[k]) as poller:
                assert poller.poll(0, None, 0.0) == Work(1, b"x" * n)


def test_seats_refuse_strangers_and_weak_tokens() -> None:
    relay = SubstepRelay()
    with pytest.raises(ValueError, match="16 bytes"):
        relay.open("r", "s", {0: b"short"})
    relay.open("r", "s", TOKENS)
    with pytest.raises(SeatRefused):
        relay.poll("r", "s", 0, TOKENS[1], 0, None, 0.0)  # client 1's token for seat 0
    with pytest.raises(SeatRefused):
        relay.poll("r", "s", 7, TOKENS[0], 0, None, 0.0)
    with pytest.raises(UnknownSession):
        relay.poll("r", "other", 0, TOKENS[0], 0, None, 0.0)
    with pytest.raises(UnknownSession):
        relay.relay("r", "s", {7: b"x"}, {}, 0.0, BUDGET)
    relay.open("r", "next", TOKENS)  # a run has one session: the old one is closed
    assert relay.poll("r", "s", 0, TOKENS[0], 0, None, 0.0) == Work(closed=True)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[CoordinatorState]:
    with CoordinatorState(tmp_path / "coordinator.sqlite") as opened:
        opened.create_run("r", "fedcollab", valid_request("fedcollab"))
        yield opened


@pytest.fixture
def address(state: CoordinatorState) -> Iterator[str]:
    server, port = serve(state, FakeSigner())
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _step(n: int) -> Instruction:
    task = Discriminate(
        peers=(1,), targets=(1,), samples=4, step=n, local_steps=1, lr=0.1, batch_size=2,
        hidden=3, features="raw",
    )  # fmt: skip
    return Instruction(0, task, torch.full((4,), float(n)))


def _answer(instruction: Instruction) -> Reply:
    """A stand-in node: answers a step with its model doubled."""
    assert instruction.model is not None
    return Reply(ClientMetrics(disc_acc=(0.5,)), instruction.model * 2)


def test_a_session_over_grpc_runs_steps_on_the_seat_loop(
    state: CoordinatorState, address: str
) -> None:
    token = state.new_launch("r")
    with SessionFeeder(address, "r", token) as feeder:
        feeder.open("s", {0: TOKENS[0]})
        poller = SeatPoller(address, "r", "s", 0, TOKENS[0])
        with ThreadPoolExecutor(1) as pool:
            served = pool.submit(serve_seat, poller, _answer, 30.0)
            for n in range(1, 4):
                work = content_bytes(encode_instruction(_step(n)))
                relayed = feeder.relay("s", {0: work}, {}, 30.0)
                result = relayed.results[0]
                assert relayed.steps == {0: n} and not result.error
                reply = decode_reply(content_from_bytes(result.payload))
                assert torch.equal(reply.model, torch.full((4,), 2.0 * n))
            # Anything but a sub-round verb is answered with an error, not run.
            other = Instruction(0, Evaluate(), None)
            refused = feeder.relay("s", {0: content_bytes(encode_instruction(other))}, {}, 30.0)
            assert "not a sub-round step" in refused.results[0].error
            feeder.close_session("s")
            assert served.result(timeout=30).steps == 4
        poller.close()


def test_a_stale_serverapp_cannot_open_or_feed_a_session(
    state: CoordinatorState, address: str
) -> None:
    old = state.new_launch("r")
    current = state.new_launch("r")  # the daemon relaunched the run: ``old`` is stale
    with SessionFeeder(address, "r", old) as stale:
        with pytest.raises(CoordinatorError, match="launch") as caught:
            stale.open("s", TOKENS)
        assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
    with SessionFeeder(address, "r", current) as feeder:
        feeder.open("s", TOKENS)
    with SessionFeeder(address, "r", old) as stale, pytest.raises(CoordinatorError):
        stale.relay("s", {0: b"x"}, {}, 1.0)


def test_a_poll_with_another_seats_token_is_refused(state: CoordinatorState, address: str):
    with SessionFeeder(address, "r", state.new_launch("r")) as feeder:
        feeder.open("s", TOKENS)
    with SeatPoller(address, "r", "s", 1, TOKENS[0]) as thief:
        with pytest.raises(CoordinatorError) as caught:
            thief.poll(0, None, 0.0)
        assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_over_tls_a_member_polls_only_its_own_seat_and_opens_nothing(
    state: CoordinatorState,
) -> None:
    ca = TestCA()
    server_cred = ca.coordinator()
    tls = ServerTLS(server_cred.cert, server_cred.key, client_ca=ca.cert_pem)
    server, port = serve(state, FakeSigner(), tls=tls)
    address = f"127.0.0.1:{port}"

    def as_(credential) -> ClientTLS:
        return ClientTLS(ca.cert_pem, credential.cert, credential.key)

    member0, member1 = as_(ca.member(0)), as_(ca.member(1))
    try:
        token = state.new_launch("r")
        with SessionFeeder(address, "r", token, member1) as member_feeder:
            with pytest.raises(CoordinatorError) as caught:
                member_feeder.open("s", TOKENS)  # even with the launch token
            assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
        with SessionFeeder(address, "r", token, as_(server_cred)) as feeder:
            feeder.open("s", TOKENS)
            # Member 1 holding member 0's token (stolen) still cannot take seat 0.
            with SeatPoller(address, "r", "s", 0, TOKENS[0], member1) as thief:
                with pytest.raises(CoordinatorError) as caught:
                    thief.poll(0, None, 0.0)
                assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
            owner = SeatPoller(address, "r", "s", 0, TOKENS[0], member0)
            with owner, ThreadPoolExecutor(1) as pool:
                asked = pool.submit(feeder.relay, "s", {0: b"step"}, {}, 30.0)
                assert owner.poll(0, None, 30.0) == Work(1, b"step")
                owner.poll(1, StepResult(b"ok"), 0.0)
                assert asked.result() == Relayed({0: 1}, {0: StepResult(b"ok")})
    finally:
        server.stop(None)


class SeatGrid:
    """A stand-in for Flower's Grid that delivers seat messages to seat loops in threads.

    A client in ``hung`` gets its seat but never polls it (a SIGSTOPped node); the others run
    ``serve_seat`` against the real relay, and their seat message's reply appears once their
    loop returns, as the SuperNode would send it.
    """

    def __init__(
        self,
        address: str,
        run_id: str,
        hung: set[int],
        failing: frozenset[int] = frozenset(),
        lost: frozenset[int] = frozenset(),
    ) -> None:
        self.address, self.run_id, self.hung, self.failing = address, run_id, hung, failing
        self.lost = lost
        """Clients whose node goes offline with the seat (its SuperNode killed, and its
        daemon marked the node offline): the SuperLink answers for it, as itself."""
        self.replies: dict[str, object] = {}
        self._count = 0
        self._threads: list[threading.Thread] = []

    def push_messages(self, messages):
        ids = []
        for message in messages:
            self._count += 1
            message_id = f"m{self._count}"
            message.metadata.__dict__["_message_id"] = message_id
            ids.append(message_id)
            client = message.metadata.dst_node_id - 100
            if client in self.failing:  # its ClientApp failed before taking the seat
                self._reply(message_id, message.metadata.dst_node_id, "no route to the relay")
            elif client in self.lost:
                unavailable = "node went offline"
                self._reply(message_id, SUPERLINK_NODE_ID, unavailable, code=NODE_UNAVAILABLE)
            elif client not in self.hung:
                seat = decode_seat(message.content)
                thread = threading.Thread(
                    target=self._serve,
                    args=(client, seat, message_id, message.metadata.dst_node_id),
                )
                thread.start()
                self._threads.append(thread)
        return ids

    def _serve(self, client: int, seat, message_id: str, node: int) -> None:
        with SeatPoller(self.address, self.run_id, seat.session, client, seat.token) as poller:
            served = serve_seat(poller, _answer, seat.idle_s)
        self._reply(message_id, node, None, encode_served(served))

    def _reply(
        self,
        message_id: str,
        node: int,
        error: str | None,
        content: RecordDict | None = None,
        code: int = 1,
    ) -> None:
        metadata = SimpleNamespace(
            reply_to_message_id=message_id, src_node_id=node, created_at=time.time()
        )
        self.replies[message_id] = SimpleNamespace(
            metadata=metadata,
            has_error=lambda: error is not None,
            error=SimpleNamespace(code=code, reason=error),
            content=content,
        )

    def pull_messages(self, message_ids):
        return [self.replies.pop(m) for m in list(message_ids) if m in self.replies]

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=60)


def test_a_hung_client_costs_one_deadline_and_does_not_hold_up_the_session_s_end(
    state: CoordinatorState, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(substeps, "CLOSE_GRACE_S", 0.5)
    # The identity Flower's ServerApp process sets before it builds any Message.
    for name, value in (("_task_id", 1), ("_run_id", 7), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)
    grid = SeatGrid(address, "r", hung={1})
    with SessionFeeder(address, "r", state.new_launch("r")) as feeder:
        relayed = RelayedSteps(grid, feeder, timeout_s=2.0, signals=Polling(0.05))
        nodes = {0: 100, 1: 101}
        first = relayed.send({0: _step(1), 1: _step(1)}, nodes)
        assert set(first) == {0}  # client 1 missed its deadline
        assert torch.equal(first[0].model, torch.full((4,), 2.0))
        # The method drops the silent client; the session goes on without a new seat.
        second = relayed.send({0: _step(2)}, nodes)
        assert torch.equal(second[0].model, torch.full((4,), 4.0))
        # A message deadline of an hour would hang here if closing waited for client 1.
        relayed.timeout_s = 3600.0
        ended = relayed.close()
        assert ended.failed == {}
        # Client 0's seat served both steps; it is recorded as one "seat" message.
        [timing] = ended.timings
        assert (timing.client, timing.steps, timing.kind) == (0, 2, "seat")
    grid.join()


def test_a_seat_whose_serverapp_stopped_feeding_it_gives_up(
    state: CoordinatorState, address: str
) -> None:
    """The node must be freed for the next run when its ServerApp vanished mid-session."""
    with SessionFeeder(address, "r", state.new_launch("r")) as feeder:
        feeder.open("s", {0: TOKENS[0]})
    with (
        SeatPoller(address, "r", "s", 0, TOKENS[0]) as poller,
        pytest.raises(TimeoutError, match="not fed"),
    ):
        serve_seat(poller, _answer, idle_s=0.3)


def test_a_seat_that_failed_is_waited_for_no_longer(
    state: CoordinatorState, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its seat message came back with an error: the step is answered with that error
    within a heartbeat, not after the message deadline (an hour here)."""
    for name, value in (("_task_id", 1), ("_run_id", 7), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)
    grid = SeatGrid(address, "r", hung=set(), failing=frozenset({1}))
    with SessionFeeder(address, "r", state.new_launch("r")) as feeder:
        relayed = RelayedSteps(grid, feeder, timeout_s=3600.0, signals=Polling(0.05))
        outcomes = relayed.send({0: _step(1), 1: _step(1)}, {0: 100, 1: 101})
        assert torch.equal(outcomes[0].model, torch.full((4,), 2.0))
        assert outcomes[1] == "relay seat: error 1: no route to the relay"
        assert relayed.close().failed == {1: "error 1: no route to the relay"}
    grid.join()


def test_a_seat_whose_node_went_offline_is_freed_at_once(
    state: CoordinatorState, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SuperLink answers a lost node's seat message itself (its own node id as the
    sender) once the daemon has marked the node offline: the step is settled within a
    heartbeat as the node's loss, not after the message deadline."""
    for name, value in (("_task_id", 1), ("_run_id", 7), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)
    grid = SeatGrid(address, "r", hung=set(), lost=frozenset({1}))
    with SessionFeeder(address, "r", state.new_launch("r")) as feeder:
        relayed = RelayedSteps(grid, feeder, timeout_s=40.0, signals=Polling(0.05))
        started = time.monotonic()
        outcomes = relayed.send({0: _step(1), 1: _step(1)}, {0: 100, 1: 101})
        assert time.monotonic() - started < 20.0
        assert torch.equal(outcomes[0].model, torch.full((4,), 2.0))
        assert isinstance(outcomes[1], str) and node_gone(outcomes[1])
        assert relayed.close().failed == {}  # told as the node's loss, not as a failure
    grid.join()


def test_a_seat_reply_lost_on_the_way_is_the_nodes_loss_not_a_failure(
    state: CoordinatorState, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seat's SuperNode killed while pushing the seat's reply (issue #32's soak killed
    every client at once): client 1's steps came back through the relay, only the reply that
    says so is lost; client 2's seat reply, lost before it served its step, is its node's
    loss, passed on as it is (the pool records ``no_reply``). Neither is a failure."""
    for name, value in (("_task_id", 1), ("_run_id", 7), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)
    grid = SeatGrid(address, "r", hung=set(), failing=frozenset({2}))
    lost = lost_content(ObjectPullError("dba6", "retry limit reached"))

    def losing(grid, message_ids):
        pulled = pull_replies(grid, message_ids)
        return [replace(p, content=lost) if p.src_node_id in (101, 102) else p for p in pulled]

    monkeypatch.setattr(exchange, "pull_replies", losing)
    with SessionFeeder(address, "r", state.new_launch("r")) as feeder:
        relayed = RelayedSteps(grid, feeder, timeout_s=40.0, signals=Polling(0.05))
        outcomes = relayed.send({k: _step(1) for k in range(3)}, {k: 100 + k for k in range(3)})
        assert all(torch.equal(outcomes[k].model, torch.full((4,), 2.0)) for k in (0, 1))
        assert outcomes[2] == lost
        assert relayed.close().failed == {}
    grid.join()


def test_a_seat_reply_that_says_nothing_of_what_it_served_is_refused() -> None:
    """A seat must answer with what it served; a reply without it (a ClientApp of another
    version) is unreadable, so the ServerApp records the seat as failed, not as a timing."""
    with pytest.raises(ValueError, match="served"):
        decode_served(RecordDict())
    assert decode_served(encode_served(Served(3, 0.5))) == Served(3, 0.5)
