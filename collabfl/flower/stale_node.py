"""Let a restarted SuperNode back in at once: mark its killed predecessor offline first.

Flower 1.41's SuperLink refuses to activate a node that it still counts as online, and it
counts a node online until twice its heartbeat interval after the last heartbeat
(``HEARTBEAT_PATIENCE`` × ``HEARTBEAT_DEFAULT_INTERVAL`` = 2 × 30 s; the SuperNode has no
option to send a shorter interval, and the SuperLink would not take less than 10 s). A
SuperNode that exits cleanly deactivates itself; one killed (SIGKILL, OOM, a crash) does
not, and with a registered key its restart is the same node: for about 60 s every
activation failed with "Failed to activate SuperNode". Before each start the client
daemon therefore makes the call a clean exit makes, Fleet ``DeactivateNode`` for the node
id the last SuperNode logged, signed with the same SuperNode key (the SuperLink accepts it
only from that node's own key, so this deactivates nothing but our own node).

This uses Flower's own Fleet HTTP client and SuperNode request signing (internals, pinned
by tests/test_stale_node.py's contract test).

Only with TLS: an insecure SuperNode may not keep a key (Flower 1.41 and 1.42 exit when
given one without TLS, their exit code 303), so it signs with a key made in its process and
lost with it, and nothing else can sign its deactivation; its node stays online until the
heartbeat lapse.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from collabfl.kernel.log_rotation import rotated
from collabfl.kernel.supervisor import OUTPUT_LIMIT

log = logging.getLogger(__name__)

NODE_ID_LINE = re.compile(rb"SuperNode ID: (\d+)")
"""What the SuperNode logs once it has joined (flower/processes.py waits for the same)."""
CALL_TIMEOUT_S = 5.0


def last_node_id(supernode_log: Path) -> int | None:
    """The node id the SuperNode logged last, if its log (or, just after a rotation, the
    latest rotated file) names one."""
    for path in rotated(supernode_log)[:2]:
        try:
            with open(path, "rb") as log_file:
                log_file.seek(max(0, log_file.seek(0, 2) - 4 * OUTPUT_LIMIT))
                found = NODE_ID_LINE.findall(log_file.read())
        except OSError:
            continue
        if found:
            return int(found[-1])
    return None


def preload() -> None:
    """Import the Flower modules ``deactivate`` uses (2 s of CPU, far more on a busy
    machine), so that the first restart after a crash does not wait for them: the daemon
    calls this in a background thread at start."""
    import flwr.supernode.fleet_http_client
    import flwr.supernode.node_auth_http_interceptor  # noqa: F401


def deactivate(superlink: str, root_certificates: Path, private_key: Path, node_id: int) -> bool:
    """Ask the SuperLink to mark ``node_id`` offline, as the node itself; whether it did.

    The SuperLink says no when the node is not online (the usual case after a clean stop)
    or the key is not the node's; either way the next activation decides.
    """
    import httpx
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    from flwr.proto.fleet_pb2 import DeactivateNodeRequest  # pylint: disable=no-name-in-module
    from flwr.supernode.fleet_http_client import FleetHttpClient
    from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

    key = load_ssh_private_key(private_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{private_key} is not an EC key")
    signer = NodeAuthHttpInterceptor(key, key.public_key())
    client = FleetHttpClient(
        f"https://{superlink}",
        interceptors=[signer],
        verify=str(root_certificates),
        timeout=CALL_TIMEOUT_S,
    )
    with client:
        try:
            client.DeactivateNode(DeactivateNodeRequest(node_id=node_id))
        except (httpx.HTTPError, RuntimeError) as error:
            log.debug("node %s not deactivated: %s", node_id, error)
            return False
    log.info("marked node %s (this SuperNode's last run) offline on the SuperLink", node_id)
    return True


def clear_stale_node(
    supernode_log: Path, superlink: str, root_certificates: Path, private_key: Path
) -> None:
    """Before a SuperNode starts: deactivate the node its last run logged, if any."""
    node_id = last_node_id(supernode_log)
    if node_id is not None:
        deactivate(superlink, root_certificates, private_key, node_id)
