"""What an attacker on the federation's network tries, run from its own host of a test bed.

``python -m tests.support.attacks '<json>'`` runs one attack and prints its outcome as one
JSON line, so a test can run it inside the attacker's network namespace and assert how each
surface refused. The attacker holds the federation's public CA certificate and, in the
stolen-certificate variants, a member's certificate and key. Outcomes are stable strings:
a gRPC status code name (``"OK"``, ``"PERMISSION_DENIED"``, ``"UNAVAILABLE"``, ...), or for
HTTP ``"http <status>"``, ``"connection refused"`` or ``"tls handshake failed"``.
"""

from __future__ import annotations

import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from collabfl.kernel.grants import GrantSigner, generate_private_key
from collabfl.kernel.tls import ClientTLS
from collabfl.proto import coordinator_pb2 as pb
from collabfl.proto import coordinator_pb2_grpc as pb_grpc
from collabfl.proto import peer_pb2, peer_pb2_grpc

TIMEOUT_S = 10.0


def _channel(address: str, ca: str, cert: str | None, key: str | None) -> grpc.Channel:
    tls = ClientTLS.from_files(Path(ca), *(Path(p) for p in (cert, key) if p))
    return grpc.secure_channel(address, tls.credentials())


def _code(call: Callable[[], Any]) -> str:
    try:
        reply = call()
        if hasattr(reply, "__iter__") and not hasattr(reply, "ListFields"):
            list(reply)  # a server stream: its status comes at the end
    except grpc.RpcError as error:
        return error.code().name
    return "OK"


def coordinator_admin(address: str, ca: str, cert: str | None, key: str | None) -> dict:
    """Administer the coordinator: create/stop runs, register members, issue grants."""
    stub = pb_grpc.CoordinatorStub(_channel(address, ca, cert, key))
    evil = pb.Member(client_id=0, peer_address="attacker.example:1")
    calls = {
        "CreateRun": lambda: stub.CreateRun(
            pb.CreateRunRequest(run_id="evil", method="dpfl", config_json="{}"), timeout=TIMEOUT_S
        ),
        "StopRun": lambda: stub.StopRun(pb.RunRef(run_id="evil"), timeout=TIMEOUT_S),
        "RegisterMembers": lambda: stub.RegisterMembers(
            pb.RegisterMembersRequest(members=[evil]), timeout=TIMEOUT_S
        ),
        "IssueGrants": lambda: stub.IssueGrants(
            pb.IssueGrantsRequest(
                run_id="evil", round=0, fetches=[pb.Fetch(fetcher=0, owners=[1])], ttl_s=60
            ),
            timeout=TIMEOUT_S,
        ),
    }
    return {name: _code(call) for name, call in calls.items()}


def peer_fetch(
    address: str,
    ca: str,
    cert: str | None,
    key: str | None,
    owner: int,
    round: int,
    grant: str,
    run: str = "",
) -> dict:
    """Fetch ``owner``'s ``round`` model of ``run`` with ``grant`` (text; ``"forged"``:
    self-signed)."""
    token = grant.encode()
    if grant == "forged":
        token = GrantSigner(generate_private_key()).issue("any", 0, owner, round, 600)
    stub = peer_pb2_grpc.PeerModelsStub(_channel(address, ca, cert, key))
    request = peer_pb2.FetchRequest(run=run, owner=owner, round=round, grant=token)
    return {"FetchModel": _code(lambda: stub.FetchModel(request, timeout=TIMEOUT_S))}


def peer_health(address: str, ca: str, cert: str | None, key: str | None) -> dict:
    stub = peer_pb2_grpc.PeerModelsStub(_channel(address, ca, cert, key))
    return {"Health": _code(lambda: stub.Health(peer_pb2.HealthRequest(), timeout=TIMEOUT_S))}


def http(
    url: str, ca: str, cert: str | None, key: str | None, body_hex: str = "", method: str = "POST"
) -> dict:
    """One HTTP(S) request as Flower's clients make it (protobuf body); its outcome."""
    context = ssl.create_default_context(cafile=ca)
    if cert and key:
        context.load_cert_chain(cert, key)
    request = urllib.request.Request(
        url,
        data=bytes.fromhex(body_hex) if method == "POST" else None,
        headers={"content-type": "application/protobuf"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
            return {"outcome": f"http {response.status}"}
    except urllib.error.HTTPError as error:
        return {"outcome": f"http {error.code}"}
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return {"outcome": "connection refused"}
        if isinstance(error.reason, ssl.SSLError):
            return {"outcome": "tls handshake failed"}
        return {"outcome": f"error {error.reason}"}
    except (ssl.SSLError, ConnectionResetError):
        return {"outcome": "tls handshake failed"}


ATTACKS: dict[str, Callable[..., dict]] = {
    "coordinator_admin": coordinator_admin,
    "peer_fetch": peer_fetch,
    "peer_health": peer_health,
    "http": http,
}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    print(json.dumps(ATTACKS[spec.pop("attack")](**spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
