"""A task claim signed for one SuperLink cannot be replayed to the next one.

Flower refuses a replayed SuperExec claim by its nonce, which it remembers for the
signature's age window (305 s); a SuperLink on the in-memory state (the coordinator's
default) forgets the nonces when it restarts. The daemon writes a new secret before every
SuperLink start (``rotate_secret``), so a claim captured before the restart no longer
verifies, while the launcher's signer, reading the file again, goes on claiming."""

from __future__ import annotations

import time

import httpx
import pytest
from flwr.proto.runtime_pb2 import AcquireTaskRequest
from flwr.supercore.constant import TaskType
from flwr.supercore.runtime import RuntimeHttpClient
from support.task_claims import superexec_superlink

from collabfl.client.daemon import supernode_starting
from collabfl.flower.superexec_auth import claim_signer, ensure_secret, rotate_secret

pytestmark = pytest.mark.federation


class Recorder:
    """Keeps each request as it leaves, signed (it comes after the signer in the chain)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def intercept(self, context, call_next):
        self.requests.append(context.request)
        return call_next(context)


def claim(address: str, signer, recorder: Recorder | None = None) -> None:
    """One signed claim, asked again while the SuperLink does not listen yet."""
    interceptors = [signer] if recorder is None else [signer, recorder]
    client = RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None, interceptors=interceptors
    )
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                client.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.SERVER_APP]))
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        client.close()


def replay(request: httpx.Request, address: str) -> int:
    """The HTTP status a SuperLink at ``address`` answers the very same signed request."""
    url = request.url.copy_with(netloc=address.encode())
    again = httpx.Request(request.method, url, headers=request.headers, content=request.content)
    with httpx.Client() as client:
        return client.send(again).status_code


def test_a_claim_captured_before_a_restart_is_void_after_the_secret_rotates(tmp_path):
    recorder = Recorder()
    signer = claim_signer(tmp_path / "superexec.secret")
    with superexec_superlink(tmp_path) as (_, address, _):
        claim(address, signer, recorder)
        captured = recorder.requests[-1]
        assert replay(captured, address) != 200, "a SuperLink that saw the nonce refuses it"
    with superexec_superlink(tmp_path) as (_, address, _):
        claim(address, signer)  # answering now
        assert replay(captured, address) == 200, "a fresh in-memory SuperLink forgot the nonce"
    rotate_secret(tmp_path)
    with superexec_superlink(tmp_path) as (_, address, _):
        claim(address, signer)  # the same signer signs with the new secret
        assert replay(captured, address) != 200


def test_a_client_daemons_supernode_gets_a_new_secret_before_each_start(tmp_path):
    """A participant's SuperNode forgets the nonces too: the same rotation, before each
    start, then the stale node cleared."""
    secret = ensure_secret(tmp_path)
    seen, cleared = {secret.read_bytes()}, []
    for _ in range(3):
        supernode_starting(tmp_path, lambda: cleared.append(True))
        seen.add(secret.read_bytes())
    assert len(seen) == 4 and len(cleared) == 3
    assert secret.stat().st_mode & 0o777 == 0o600
    supernode_starting(tmp_path, None)  # insecure: nothing to clear, still rotated
    assert secret.read_bytes() not in seen
