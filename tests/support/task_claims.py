"""Claim a Flower task on a runtime API as any local process could: what it is answered;
and a SuperLink that takes only claims signed with its SuperExec secret."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flwr.proto.runtime_pb2 import AcquireTaskRequest
from flwr.supercore.constant import TaskType
from flwr.supercore.runtime import RuntimeHttpClient

from collabfl.flower.processes import flower_binary
from collabfl.flower.superexec_auth import claim_signer, ensure_secret
from collabfl.kernel.ports import PortReservation


def claim_task(
    address: str, root_certificates: bytes | None = None, secret: Path | None = None
) -> str:
    """``refused: <error>`` (Flower's refusal, whatever its class) or ``answered: token
    '<token>'`` (an empty token: no task waiting); signed with ``secret`` when given."""
    client = RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=root_certificates is None,
        root_certificates=root_certificates,
        interceptors=[] if secret is None else [claim_signer(secret)],
    )
    types = [TaskType.SERVER_APP, TaskType.CLIENT_APP]
    try:
        reply = client.AcquireTask(AcquireTaskRequest(supported_task_types=types))
    except Exception as error:
        return f"refused: {type(error).__name__}: {error}"
    finally:
        client.close()
    return f"answered: token {reply.token!r}"


@contextmanager
def superexec_superlink(folder: Path) -> Iterator[tuple[subprocess.Popen, str, Path]]:
    """A real SuperLink (in-memory database, process isolation) that takes only task claims
    signed with the secret it makes in ``folder``: (its process, its address, the secret).
    Its log is ``folder/superlink.log``; it is stopped on leaving."""
    secret = ensure_secret(folder)
    reserved = PortReservation(1)
    port = reserved.ports[0]
    command = [
        flower_binary("flower-superlink"), "--insecure", "--database", ":flwr-in-memory:",
        "--host", "127.0.0.1", "--port", str(port), "--isolation", "process",
        "--superexec-auth-secret-file", str(secret),
    ]  # fmt: skip
    with open(folder / "superlink.log", "wb") as log:
        superlink = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield superlink, f"127.0.0.1:{port}", secret
    finally:
        superlink.terminate()
        superlink.wait(timeout=30)
        reserved.release()
