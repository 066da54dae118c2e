"""Claim a Flower task on a runtime API as any local process could: what it is answered."""

from __future__ import annotations

from pathlib import Path

from flwr.proto.runtime_pb2 import AcquireTaskRequest
from flwr.supercore.constant import TaskType
from flwr.supercore.runtime import RuntimeHttpClient

from collabfl.flower.superexec_auth import claim_signer


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
