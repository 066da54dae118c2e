"""Contract (fails loudly on a Flower upgrade): the daemon's in-process Control API calls
(coordinator/superlink/superlink_control.py) against a real SuperLink started as the TLS daemon
starts it. They use Flower's ControlHttpClient, its request and answer messages, the PEM form
``flwr supernode register`` sends a key in, the runtime-version headers the SuperLink
checks, the FAB ``flwr run`` builds (``build_fab_from_disk``, ``Fab``, ``fab_to_proto``) and
its typed run config (``user_config_to_proto``); that a SuperNode with a key registered this
way joins is shown by the TLS federation tests (tests/test_federation_tls.py), that a run
started this way runs and its ServerApp's log reaches serverapp.log by
tests/test_federation_e2e.py."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk
from flwr.common.serde import fab_to_proto, user_config_from_proto, user_config_to_proto
from flwr.proto.control_pb2 import (
    ListRunsRequest,
    StartRunRequest,
    StopRunRequest,
    StreamLogsRequest,
    StreamLogsResponse,
)
from flwr.supercore.control import ControlHttpClient
from flwr.supercore.fab import Fab
from typer.testing import CliRunner

from collabfl.cli.main import app as cli_app
from collabfl.coordinator.gateway.fleet_gateway import LoopbackTLS
from collabfl.coordinator.member_status import _timestamp
from collabfl.coordinator.superlink.flower_runs import app_fab
from collabfl.coordinator.superlink.run_launcher import write_app
from collabfl.coordinator.superlink.superlink_control import (
    ControlError,
    SuperLinkControl,
    SuperLinkUnreachable,
    _utc,
)
from collabfl.flower.supernode_key import ensure_supernode_key
from collabfl.kernel import exit_status
from collabfl.kernel.supervisor import stop_group
from tests.support.tls_superlink import TlsSuperLink

pytestmark = pytest.mark.federation


@pytest.fixture(scope="module")
def superlink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsSuperLink]:
    with TlsSuperLink(tmp_path_factory.mktemp("control") / "coordinator") as running:
        running.nodes()  # answers
        yield running


def _key(folder: Path) -> str:
    return ensure_supernode_key(folder)[1].read_text()


def test_contract_a_key_is_registered_listed_found_and_unregistered(superlink, tmp_path):
    control = superlink.control
    node = control.register(_key(tmp_path))
    listed = {n["node-id"]: n for n in control.nodes()}
    assert listed[str(node)]["status"] == "registered"
    assert listed[str(node)]["online-at"] == "N/A"

    with pytest.raises(ControlError, match=r"refused to register.*already in use"):
        control.register(_key(tmp_path))

    assert control.node_holding(_key(tmp_path)) == node
    assert control.node_holding(_key(tmp_path / "other")) is None

    control.unregister(node)
    assert {n["node-id"]: n["status"] for n in control.nodes()}[str(node)] == "unregistered"
    assert control.node_holding(_key(tmp_path)) is None
    with pytest.raises(ControlError, match=f"refused to unregister node {node}.*not found"):
        control.unregister(node)


def test_a_key_flower_cannot_read_is_refused_before_any_call(tmp_path, closed_port):
    nobody = f"127.0.0.1:{closed_port}"  # a call would fail to connect instead
    control = SuperLinkControl(nobody, None)
    with pytest.raises(ControlError, match="not an OpenSSH public key"):
        control.register("ssh-ed25519 AAAA-not-a-key")
    rsa = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDD" + "A" * 168 + "="
    with pytest.raises(ControlError):
        control.register(rsa)


def test_a_superlink_with_another_certificate_is_not_asked(superlink, tmp_path):
    other = LoopbackTLS.ensure(tmp_path / "other")
    control = SuperLinkControl(superlink.control.address, other.ca)
    with pytest.raises(ControlError, match=r"could not list the SuperNodes at .*(SSL|certificate)"):
        control.nodes()
    control.close()


def test_a_superlink_asked_from_the_daemon_still_stops_on_sigterm(tmp_path):
    with TlsSuperLink(tmp_path / "coordinator") as superlink:
        superlink.nodes()
        superlink.control.register(_key(tmp_path))
        superlink.control.nodes()
        assert superlink.process is not None
        stop_group(superlink.process, grace_s=8.0)
        # Killed (SIGKILL) means it waited for a connection the daemon kept open.
        assert superlink.process.returncode != -signal.SIGKILL


def test_times_read_back_as_member_status_reads_flowers():
    assert _utc("") == "N/A"
    when = _timestamp(_utc("2026-11-26T05:30:00.250000+01:00"))
    assert when == datetime(2026, 11, 26, 4, 30, tzinfo=UTC).timestamp()


def test_a_superlink_that_does_not_listen_is_a_control_error(closed_port):
    control = SuperLinkControl(f"127.0.0.1:{closed_port}", None)
    with pytest.raises(ControlError, match="could not list the SuperNodes"):
        control.nodes()


def test_register_supernode_without_a_started_daemon_says_so_and_binds_nothing(tmp_path):
    state_dir = tmp_path / "coordinator"
    state_dir.mkdir()
    _, public_key = ensure_supernode_key(tmp_path / "member")
    register = [
        "admin", "register-supernode", "--client-id", "1", "--key", str(public_key),
        "--state-dir", str(state_dir),
    ]  # fmt: skip
    result = CliRunner().invoke(cli_app, register)
    assert result.exit_code == exit_status.USAGE
    assert "has the coordinator daemon started with this --state-dir?" in result.output
    assert not (state_dir / "coordinator.db").exists()


def test_contract_the_flower_api_a_launch_uses():
    """What starting, stopping and streaming a run build on, named so an upgrade that moves
    or renames one fails here first."""
    assert {"fab", "override_config", "federation"} <= set(
        StartRunRequest.DESCRIPTOR.fields_by_name
    )
    assert set(StopRunRequest.DESCRIPTOR.fields_by_name) >= {"run_id"}
    assert set(StreamLogsRequest.DESCRIPTOR.fields_by_name) >= {"run_id", "after_timestamp"}
    assert set(StreamLogsResponse.DESCRIPTOR.fields_by_name) >= {"log_output", "latest_timestamp"}
    for method in ("StartRun", "StopRun", "StreamLogs", "ListRuns", "close"):
        assert callable(getattr(ControlHttpClient, method))
    config = {"text": 'a "quoted" /path', "count": 3, "ratio": 0.5}
    assert user_config_from_proto(user_config_to_proto(config)) == config
    proto = fab_to_proto(Fab("hash", b"content", {}))
    assert (proto.hash_str, proto.content) == ("hash", b"content")


def test_contract_the_app_is_built_as_flwr_run_builds_it(tmp_path):
    fab = app_fab(write_app(tmp_path))
    assert fab.content == build_fab_from_disk(tmp_path / "app")
    assert fab.hash_str == hashlib.sha256(fab.content).hexdigest()


def test_contract_a_run_is_started_with_its_typed_config_streamed_and_stopped(superlink, tmp_path):
    """No ServerApp claims it here: the run stays pending until stopped, and its log stream
    ends when it is."""
    control = superlink.control
    fab = app_fab(write_app(tmp_path))
    config = {"run-id": 'a "quoted" run', "expected-clients": 3, "join-timeout": 5.5}
    flower_run = control.start_run(fab, config)
    assert control.start_run(fab, config) != flower_run
    listed = control._client.ListRuns(ListRunsRequest(run_id=flower_run)).run_dict[flower_run]
    started = user_config_from_proto(listed.override_config)
    assert {key: started[key] for key in config} == config
    assert listed.fab_hash == fab.hash_str

    stream = control.log_stream(flower_run)
    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(stream), daemon=True)
    follower.start()
    time.sleep(1.0)
    assert follower.is_alive()  # a pending run logs nothing: the stream waits
    control.stop_run(flower_run)
    follower.join(timeout=30)
    assert not follower.is_alive()  # the run ended: so did its stream
    with pytest.raises(ControlError, match=f"refused to stop Flower run {flower_run}"):
        control.stop_run(flower_run)


def test_closing_a_log_stream_ends_it_at_once(superlink, tmp_path):
    control = superlink.control
    flower_run = control.start_run(app_fab(write_app(tmp_path)), {})
    stream = control.log_stream(flower_run)
    ended = threading.Event()

    def follow() -> None:
        with pytest.raises(ControlError):  # hung up: the stream breaks, it did not end
            list(stream)
        ended.set()

    threading.Thread(target=follow, daemon=True).start()
    time.sleep(1.0)
    assert not ended.is_set()
    stream.close()
    assert ended.wait(timeout=5)
    control.stop_run(flower_run)


class _QuietStream(BaseHTTPRequestHandler):
    """Answers a stream request, stays quiet for ``QUIET_S``, then sends one frame."""

    QUIET_S = 1.5

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/vnd.flwr.protobuf-stream")
        self.end_headers()
        self.wfile.flush()
        time.sleep(self.QUIET_S)
        payload = StreamLogsResponse(log_output="after a quiet while\n").SerializeToString()
        self.wfile.write(len(payload).to_bytes(4, "big") + payload)

    def log_message(self, *args: object) -> None:
        pass


def test_contract_a_quiet_log_stream_outlasts_the_clients_read_timeout():
    """A run may log nothing for minutes: Flower's client reads a stream with no read
    timeout, so the follower does not end (and relaunch a live run) on a quiet stream."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _QuietStream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with ControlHttpClient(base, timeout=_QuietStream.QUIET_S / 5) as client:
            replies = list(client.StreamLogs(StreamLogsRequest(run_id=1)))
        assert [r.log_output for r in replies] == ["after a quiet while\n"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_superlink_not_listening_yet_is_unreachable_not_a_refusal(closed_port: int) -> None:
    """Flower's HTTP client lets a refused connection through as httpx's ConnectError: the
    run launcher waits on it (nothing reached a SuperLink) instead of counting a launch."""
    control = SuperLinkControl(f"127.0.0.1:{closed_port}", None)
    try:
        with pytest.raises(SuperLinkUnreachable, match="stop Flower run 7"):
            control.stop_run(7)
        with pytest.raises(SuperLinkUnreachable):
            control.start_run(fab_to_proto(Fab("", b"", {})), {"rounds": 1})
    finally:
        control.close()
