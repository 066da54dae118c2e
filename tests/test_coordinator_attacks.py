"""Attacks on the coordinator service over real gRPC on loopback (issue #11, part 2, 7, 8, 9).

The service runs with TLS and the federation's CA as client CA, as the daemon starts it;
each test plays one attacker: no certificate, a member's certificate, the operator's, the
coordinator's own without the launch token, a stale ServerApp, an oversized writer, or a
run request aimed at another run or another folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from support.coordinator import served, valid_request
from support.pki import Credential, TestCA

from collabfl.coordinator import service_client
from collabfl.coordinator.authorization import POLICY
from collabfl.coordinator.gateway.doorbell import FleetActivity
from collabfl.coordinator.service_client import (
    CoordinatorClient,
    CoordinatorError,
    CoordinatorUnreachable,
)
from collabfl.coordinator.store.state import CoordinatorState, Member
from collabfl.coordinator.superlink.launch import Launch
from collabfl.kernel.identity import Role
from collabfl.kernel.tls import ClientTLS, ServerTLS
from collabfl.proto import coordinator_pb2 as pb
from collabfl.proto import coordinator_pb2_grpc as pb_grpc
from collabfl.proto import substeps_pb2 as substeps_pb

MEMBERS = [Member(c, 1000 + c, f"127.0.0.1:{9400 + c}", 50) for c in range(3)]
RPCS = [m.name for m in pb.DESCRIPTOR.services_by_name["Coordinator"].methods]
RELAY_RPCS = [m.name for m in substeps_pb.DESCRIPTOR.services_by_name["Substeps"].methods]


@dataclass
class Federation:
    """A TLS coordinator service over ``state`` and a way to connect as anyone."""

    ca: TestCA
    state: CoordinatorState
    address: str
    runs_dir: Path
    activity: FleetActivity

    def client(self, credential: Credential | None, launch_token: str = "") -> CoordinatorClient:
        tls = ClientTLS(self.ca.cert_pem)
        if credential is not None:
            tls = ClientTLS(self.ca.cert_pem, credential.cert, credential.key)
        return CoordinatorClient(self.address, timeout_s=5, tls=tls, launch_token=launch_token)

    def operator(self) -> CoordinatorClient:
        return self.client(self.ca.operator())

    def server_app(self, run_id: str) -> CoordinatorClient:
        """The ServerApp of the run's latest launch: the coordinator's certificate, its token."""
        return self.client(self.ca.coordinator(), self.state.new_launch(run_id))

    def stub(self, credential: Credential) -> tuple[grpc.Channel, pb_grpc.CoordinatorStub]:
        tls = ClientTLS(self.ca.cert_pem, credential.cert, credential.key)
        channel = grpc.secure_channel(self.address, tls.credentials())
        return channel, pb_grpc.CoordinatorStub(channel)


@pytest.fixture
def federation(tmp_path: Path) -> Iterator[Federation]:
    ca = TestCA()
    coordinator = ca.coordinator()
    tls = ServerTLS(coordinator.cert, coordinator.key, client_ca=ca.cert_pem)
    runs_dir = tmp_path / "runs"
    activity = FleetActivity()
    with (
        CoordinatorState(tmp_path / "coordinator.db") as state,
        served(state, tls, runs_dir, activity) as address,
    ):
        state.register_members(MEMBERS)
        yield Federation(ca, state, address, runs_dir, activity)


def _refused(call, code: grpc.StatusCode, details: str = "") -> CoordinatorError:
    with pytest.raises(CoordinatorError) as caught:
        call()
    assert caught.value.code == code, caught.value
    assert details in str(caught.value)
    return caught.value


def test_anonymous_caller_is_refused_in_tls_mode(federation: Federation) -> None:
    stranger = TestCA().operator()  # an operator certificate, from another CA
    for credential in (None, stranger):
        with federation.client(credential) as client, pytest.raises(CoordinatorUnreachable):
            client.list_members()
    with federation.operator() as operator:
        assert len(operator.list_members()) == len(MEMBERS)


def _request_of(rpc: str) -> object:
    method = pb.DESCRIPTOR.services_by_name["Coordinator"].methods_by_name[rpc]
    return getattr(pb, method.input_type.name)()


@pytest.mark.parametrize("rpc", RPCS)
def test_member_cannot_call_anything(federation: Federation, rpc: str) -> None:
    """Create runs, issue grants, read others' data, record rounds: a member may do none."""
    federation.state.create_run("r", "dpfl", valid_request())
    channel, stub = federation.stub(federation.ca.member(1))
    with channel, pytest.raises(grpc.RpcError) as caught:
        getattr(stub, rpc)(_request_of(rpc), timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert f"member 1 may not call {rpc}" in caught.value.details()


def test_every_rpc_has_a_policy() -> None:
    """One table for both services on the port (names never collide); a member may only
    poll its relay seat (tests/test_substep_relay.py: only its own)."""
    assert sorted(POLICY) == sorted(RPCS + RELAY_RPCS)
    assert [rpc for rpc, roles in POLICY.items() if Role.MEMBER in roles] == ["Poll"]


def test_member_cannot_create_runs_or_issue_grants(federation: Federation) -> None:
    federation.state.create_run("r", "dpfl", valid_request())
    with federation.client(federation.ca.member(0)) as member:
        _refused(
            lambda: member.create_run("mine", "dpfl", valid_request()),
            grpc.StatusCode.PERMISSION_DENIED,
            "member 0 may not call CreateRun (allowed: operator)",
        )
        _refused(
            lambda: member.issue_grants("r", 0, {0: [1, 2]}, 60),
            grpc.StatusCode.PERMISSION_DENIED,
            "member 0 may not call IssueGrants (allowed: coordinator)",
        )
        _refused(lambda: member.get_metrics("r"), grpc.StatusCode.PERMISSION_DENIED)
        _refused(lambda: member.record_round("r", 0, [], {}), grpc.StatusCode.PERMISSION_DENIED)
    assert federation.state.run("r").last_completed_round is None


def test_a_self_minted_grant_is_impossible(federation: Federation) -> None:
    """Only the run's current ServerApp gets grants, and only for the round in progress."""
    with federation.operator() as operator:
        operator.create_run("r", "dpfl", valid_request())
        _refused(
            lambda: operator.issue_grants("r", 0, {0: [1]}, 60),
            grpc.StatusCode.PERMISSION_DENIED,
            "operator alice may not call IssueGrants",
        )
    with federation.client(federation.ca.coordinator()) as tokenless:
        _refused(
            lambda: tokenless.issue_grants("r", 0, {0: [1]}, 60),
            grpc.StatusCode.FAILED_PRECONDITION,
            "needs the run's launch token",
        )
    with federation.server_app("r") as server_app:
        _refused(
            lambda: server_app.issue_grants("r", 5, {0: [1]}, 60),
            grpc.StatusCode.FAILED_PRECONDITION,
            "grants are for the round in progress (0), not round 5",
        )
        assert set(server_app.issue_grants("r", 0, {0: [1, 2]}, 60)[0]) == {1, 2}


def test_coordinator_certificate_cannot_administer(federation: Federation) -> None:
    with federation.client(federation.ca.coordinator()) as coordinator:
        for call, rpc in [
            (lambda: coordinator.create_run("r", "dpfl", valid_request()), "CreateRun"),
            (coordinator.list_members, "ListMembers"),
            (coordinator.status, "Status"),
        ]:
            _refused(call, grpc.StatusCode.PERMISSION_DENIED, f"may not call {rpc}")


def test_forged_record_round_with_a_wrong_or_stale_token_is_refused_and_recorded(
    federation: Federation,
) -> None:
    with federation.operator() as operator:
        operator.create_run("r", "dpfl", valid_request())
    orphan = federation.server_app("r")  # the launch before a coordinator restart
    current = federation.server_app("r")
    forged = federation.client(federation.ca.coordinator(), "forged-token")
    with orphan, current, forged:
        for writer in (orphan, forged):
            _refused(
                lambda writer=writer: writer.record_round("r", 0, [(0, 1, 1.0)], {}),
                grpc.StatusCode.FAILED_PRECONDITION,
                "launch token is not the latest launch's",
            )
            _refused(
                lambda writer=writer: writer.finish_run("r", "failed", "forged"),
                grpc.StatusCode.FAILED_PRECONDITION,
            )
            _refused(
                lambda writer=writer: writer.record_event("r", "noise", "forged"),
                grpc.StatusCode.FAILED_PRECONDITION,
            )
        assert current.record_round("r", 0, [(0, 1, 1.0)], {}).last_completed_round == 0
    run = federation.state.run("r")
    assert (run.status, run.last_completed_round) == ("running", 0)
    stale = [e for e in federation.state.events("r") if e.kind == "stale_writer"]
    assert len(stale) == 6
    assert "RecordRound refused" in stale[0].message and stale[0].level == "error"


def test_only_the_runs_server_app_signals_the_fleet_transport(federation: Federation) -> None:
    """The signals only wake pulls, but still: no one else may send them, a wait is bounded,
    and a ServerApp's signal reaches the gateway's side (coordinator/gateway/doorbell.py)."""
    with federation.operator() as operator:
        operator.create_run("r", "dpfl", valid_request())
        _refused(
            lambda: operator.messages_pushed("r"),
            grpc.StatusCode.PERMISSION_DENIED,
            "operator alice may not call MessagesPushed",
        )
    with federation.client(federation.ca.coordinator(), "forged-token") as forged:
        _refused(lambda: forged.messages_pushed("r"), grpc.StatusCode.FAILED_PRECONDITION)
        _refused(lambda: forged.await_replies("r", 0, 1.0), grpc.StatusCode.FAILED_PRECONDITION)
    assert federation.activity.messages.count == 0
    with federation.server_app("r") as server_app:
        _refused(
            lambda: server_app.await_replies("r", 0, 60.0),
            grpc.StatusCode.INVALID_ARGUMENT,
            "timeout_s must be in [0, 5]",
        )
        assert server_app.messages_pushed("r") == 0
        assert federation.activity.messages.count == 1
        federation.activity.replies.ring()
        assert server_app.await_replies("r", 0, 5.0) == 1  # a reply it has not seen: at once
        assert server_app.await_replies("r", 1, 0.0) == 1  # none newer, no wait: the count


def test_rounds_only_follow_the_last_completed_round(federation: Federation) -> None:
    with federation.operator() as operator:
        operator.create_run("r", "dpfl", valid_request())
    with federation.server_app("r") as server_app:
        _refused(
            lambda: server_app.record_round("r", 3, [], {}),
            grpc.StatusCode.FAILED_PRECONDITION,
            "round 3 refused, the next round is 0",
        )
        server_app.record_round("r", 0, [], {})
        server_app.record_round("r", 1, [], {})
        server_app.record_round("r", 1, [], {})  # a retry of the last round
        for bad in (0, 3, 999):
            _refused(
                lambda bad=bad: server_app.record_round("r", bad, [], {}),
                grpc.StatusCode.FAILED_PRECONDITION,
                "the next round is 2",
            )
    assert federation.state.run("r").last_completed_round == 1


def test_oversized_events_and_rounds_are_refused(federation: Federation) -> None:
    with federation.operator() as operator:
        operator.create_run("r", "dpfl", valid_request())
    with federation.server_app("r") as server_app:
        _refused(
            lambda: server_app.record_event("r", "flood", "x" * 100_000),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "RecordEvent request of",
        )
        huge = {c: {"blob": "x" * 1_000_000} for c in range(5)}
        with pytest.raises(CoordinatorError) as caught:
            server_app.record_round("r", 0, [], huge)
        assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        server_app.record_event("r", "fine", "a normal line")
    assert [e.kind for e in federation.state.events("r")] == ["fine"]


def test_many_events_are_listed_in_pages(
    federation: Federation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many events a run has, no single reply carries them all."""
    monkeypatch.setattr(service_client, "EVENT_PAGE", 10)
    federation.state.create_run("r", "dpfl", valid_request())
    for index in range(25):
        federation.state.record_event("r", "noise", f"event {index}")
    with federation.operator() as operator:
        events = operator.list_events("r")
        assert [e.message for e in events] == [f"event {i}" for i in range(25)]
        assert len(operator.list_events("r", limit=7)) == 7


@pytest.mark.parametrize(
    ("config", "details"),
    [
        ({**valid_request(), "expected_clients": "three"}, "expected_clients must be int"),
        ({**valid_request(), "join_timeout": -1}, "join_timeout_s must be a positive number"),
        ({**valid_request(), "expected_client": 3}, "unknown run request keys ['expected_client']"),
        ({"expected_clients": 3}, "needs an 'experiment' object"),
        ({**valid_request(), "experiment": {"rounds": "many"}}, "rounds"),
    ],
)
def test_bad_run_config_is_refused_at_create_run(
    federation: Federation, config: dict, details: str
) -> None:
    with federation.operator() as operator:
        _refused(
            lambda: operator.create_run("r", "dpfl", config),
            grpc.StatusCode.INVALID_ARGUMENT,
            details,
        )
        _refused(
            lambda: operator.create_run("r", "nomethod", valid_request()),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unknown method 'nomethod'",
        )
        assert operator.list_runs() == []


def test_out_dir_traversal_is_refused(federation: Federation, tmp_path: Path) -> None:
    federation.runs_dir.mkdir()
    (federation.runs_dir / "link").symlink_to(tmp_path)
    with federation.operator() as operator:
        for out_dir in ("../elsewhere", "/etc/cron.d", str(tmp_path / "out"), "link/x"):
            _refused(
                lambda out_dir=out_dir: operator.create_run(
                    "r", "dpfl", valid_request(out_dir=out_dir)
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "outside the coordinator's runs directory",
            )
        inside = operator.create_run("r", "dpfl", valid_request(out_dir="team-a/r1"))
    assert inside.config["out_dir"] == "team-a/r1"


def test_second_create_run_while_one_is_active_is_refused(federation: Federation) -> None:
    with federation.operator() as operator:
        operator.create_run("first", "dpfl", valid_request())
        with federation.server_app("first") as server_app:
            server_app.record_round("first", 0, [(0, 1, 1.0)], {})
            _refused(
                lambda: operator.create_run("second", "fedavg", valid_request("fedavg")),
                grpc.StatusCode.FAILED_PRECONDITION,
                "run first is active (running); stop it (collabfl admin stop first)",
            )
            assert operator.create_run("first", "dpfl", valid_request()).status == "running"
            assert [r.run_id for r in operator.list_runs()] == ["first"]
            assert operator.get_round("first", 0).edges == [(0, 1, 1.0)]
            server_app.finish_run("first")
        assert operator.create_run("second", "fedavg", valid_request("fedavg")).active


def test_the_server_app_dials_the_tls_coordinator_with_its_launch(
    federation: Federation, tmp_path: Path
) -> None:
    """What RunLauncher hands the ServerApp is enough to write over mutual TLS."""
    coordinator = federation.ca.coordinator()
    cert, key = coordinator.write(tmp_path, "coordinator")
    token_file = tmp_path / "r.token"
    with federation.operator() as operator:
        operator.create_run("r", "dpfl", valid_request())
    token_file.write_text(federation.state.new_launch("r"))
    launch = Launch(
        run_id="r",
        coordinator=federation.address,
        launch_token_file=str(token_file),
        coordinator_ca=str(federation.ca.write_ca(tmp_path)),
        coordinator_cert=str(cert),
        coordinator_key=str(key),
    )
    with Launch.from_run_config(launch.to_run_config()).client(timeout_s=5) as server_app:
        assert server_app.get_run("r").status == "running"
        assert server_app.record_round("r", 0, [], {}).last_completed_round == 0
        assert server_app.finish_run("r").status == "finished"


def test_register_members_needs_the_server_apps_launch_token(federation: Federation) -> None:
    """As IssueGrants and RecordRound: the coordinator's certificate alone (an empty
    request, a forged token) registers nothing; the run's ServerApp and the operator do."""
    with federation.operator() as operator:
        operator.create_run("r", "dpfl", valid_request())
    newcomer = [Member(7, 1007, "127.0.0.1:9407", 50)]
    with federation.client(federation.ca.coordinator()) as tokenless:
        _refused(lambda: tokenless.register_members([]), grpc.StatusCode.NOT_FOUND, "no run ''")
        _refused(
            lambda: tokenless.register_members(newcomer, "r"),
            grpc.StatusCode.FAILED_PRECONDITION,
            "needs the run's launch token",
        )
    with federation.client(federation.ca.coordinator(), "forged-token") as forged:
        _refused(
            lambda: forged.register_members(newcomer, "r"),
            grpc.StatusCode.FAILED_PRECONDITION,
            "launch token is not the latest launch's",
        )
    assert 7 not in {m.client_id for m in federation.state.members()}
    with federation.server_app("r") as server_app:
        assert 7 in {m.client_id for m in server_app.register_members(newcomer, "r")}
    with federation.operator() as operator:
        assert operator.register_members([Member(8, 1008, "127.0.0.1:9408", 50)])
