"""flower/stale_node.py: the node id a SuperNode logged, and the Flower internals it uses.

Contract (fails loudly on a Flower upgrade): the SuperLink counts a node online for
HEARTBEAT_PATIENCE x HEARTBEAT_DEFAULT_INTERVAL after its last heartbeat (why a killed
SuperNode's restart was refused for about 60 s), the SuperNode sends that interval, and the
Fleet client and request signing the daemon deactivates its stale node with keep the shape
it calls. The behaviour itself (a SIGKILLed SuperNode rejoins within 10 s through a real
gateway and SuperLink) is tests/test_client_waits.py's.
"""

from __future__ import annotations

import inspect
import os
import subprocess

from flwr.common import constant
from flwr.proto.fleet_pb2 import DeactivateNodeRequest
from flwr.supernode import fleet_http_connection
from flwr.supernode.fleet_http_client import FleetHttpClient
from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

from collabfl.flower.processes import flower_binary, flower_env
from collabfl.flower.stale_node import last_node_id
from collabfl.flower.supernode_key import ensure_supernode_key


def test_the_last_node_id_the_supernode_logged(tmp_path):
    log = tmp_path / "supernode.log"
    assert last_node_id(log) is None  # no log yet
    log.write_bytes(b"\x1b[92mINFO \x1b[0m:      Starting Flower SuperNode\n")
    assert last_node_id(log) is None  # never joined
    log.write_bytes(
        b"\x1b[92mINFO \x1b[0m:      SuperNode ID: 17633473125067531387\n"
        b"... restarted after a crash ...\n"
        b"\x1b[92mINFO \x1b[0m:      SuperNode ID: 959193582756936885\n"
    )
    assert last_node_id(log) == 959193582756936885


def test_the_node_id_is_found_in_the_log_rotated_just_before(tmp_path):
    """The daemon rotates supernode.log by size; right after a rotation the id is in .1."""
    log = tmp_path / "supernode.log"
    (tmp_path / "supernode.log.1").write_bytes(b"INFO :      SuperNode ID: 42\nINFO : more\n")
    log.write_bytes(b"INFO :      Received: train message\n")
    assert last_node_id(log) == 42
    log.write_bytes(b"INFO :      SuperNode ID: 43\n")
    assert last_node_id(log) == 43


def test_flower_counts_a_silent_node_online_for_60_s_and_a_supernode_cannot_shorten_it():
    assert constant.HEARTBEAT_PATIENCE * constant.HEARTBEAT_DEFAULT_INTERVAL == 60
    assert constant.HEARTBEAT_MIN_INTERVAL == 10  # a SuperLink takes no interval below
    source = inspect.getsource(fleet_http_connection.http_request_response)
    assert "heartbeat_interval=HEARTBEAT_DEFAULT_INTERVAL" in source
    assert "client.DeactivateNode(DeactivateNodeRequest(node_id=node.node_id))" in source


def test_the_fleet_client_and_signing_the_daemon_uses_keep_their_shape():
    parameters = inspect.signature(FleetHttpClient).parameters
    assert {"base_url", "interceptors", "verify", "timeout"} <= set(parameters)
    assert list(inspect.signature(NodeAuthHttpInterceptor).parameters) == [
        "private_key",
        "public_key",
    ]
    assert callable(FleetHttpClient.DeactivateNode)
    assert DeactivateNodeRequest(node_id=2**64 - 1).node_id == 2**64 - 1


def test_an_insecure_supernode_cannot_keep_a_key_so_its_old_node_cannot_be_retired(tmp_path):
    """Why an insecure federation's restarted SuperNode still waits for the heartbeat lapse
    (docs/deployment.md#when-a-machine-fails): Flower refuses a SuperNode key without TLS
    (its exit code 303), so each insecure SuperNode signs with a key made in its process and
    lost with it, and the SuperLink takes a node's deactivation only signed by its key. A
    Flower that accepts the key (or lets a SuperNode send a shorter heartbeat interval, the
    test above) fails this test: then the daemon could retire the old node as with TLS."""
    private_key, _ = ensure_supernode_key(tmp_path)
    command = [
        flower_binary("flower-supernode"), "--insecure", "--superlink", "127.0.0.1:9",
        "--auth-supernode-private-key", str(private_key),
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **flower_env(tmp_path / "flwr")},
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "requires a secure TLS connection" in said and "exit-codes/303" in said
