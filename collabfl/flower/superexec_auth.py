"""The shared secret that lets only our executors claim Flower tasks on this machine.

Flower's SuperLink and SuperNode hand a task (and its token, which acts as the app for the
whole run) to whoever asks their runtime API on loopback; any local user can ask. Started
with ``--superexec-auth-secret-file`` in ``--isolation process`` they hand tasks only to a
caller that signs its claim with an HMAC of that secret (Flower's SuperExec authentication,
experimental in 1.41 and 1.42). The secret lives in the daemon's state dir, 0600, and is
read by the daemon's own processes alone.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from collabfl.kernel.atomic import write_bytes

if TYPE_CHECKING:
    from flwr.supercore.interceptors.http.superexec_auth import SuperExecAuthHttpInterceptor
    from flwr.supercore.protobuf.client import ProtobufCall, ProtobufRequestContext
    from httpx import Response

SECRET_FILE = "superexec.secret"
CLAIM_METHODS = frozenset({"/flwr.proto.Runtime/AcquireTask"})
"""The runtime API calls Flower guards with the secret: claiming a task and its token."""


def ensure_secret(state_dir: Path) -> Path:
    """The state dir's secret file, made (32 random bytes, 0600) if it does not exist."""
    path = state_dir / SECRET_FILE
    return path if path.exists() else rotate_secret(state_dir)


def rotate_secret(state_dir: Path) -> Path:
    """A fresh secret in the state dir's file, for a SuperLink or SuperNode about to start.

    Flower remembers the nonce of each signed claim for the signature's age window (305 s)
    to refuse a replay; an in-memory SuperLink or SuperNode forgets them when it restarts.
    Claims signed for its predecessor are void under the new secret, so none can be
    replayed to it.
    """
    path = state_dir / SECRET_FILE
    write_bytes(path, secrets.token_bytes(32))  # 0600, replaced atomically
    return path


class ClaimSigner:
    """Signs our executors' task claims with the secret the file holds now: it is read
    again when the file changes (``rotate_secret``), so a signer outlives the rotation."""

    def __init__(self, secret_file: Path) -> None:
        self.secret_file = secret_file
        self._version: tuple[int, int] | None = None
        self._signer: SuperExecAuthHttpInterceptor | None = None

    def intercept(self, context: ProtobufRequestContext, call_next: ProtobufCall) -> Response:
        # flwr loads here, not where the client daemon imports ensure_secret: the daemon stays
        # free of flwr (and numpy), which only its executor needs
        from flwr.supercore.interceptors.http.superexec_auth import SuperExecAuthHttpInterceptor

        stat = self.secret_file.stat()
        if self._signer is None or self._version != (stat.st_ino, stat.st_mtime_ns):
            self._version = (stat.st_ino, stat.st_mtime_ns)
            self._signer = SuperExecAuthHttpInterceptor(
                master_secret=self.secret_file.read_bytes(), protected_methods=CLAIM_METHODS
            )
        return self._signer.intercept(context, call_next)


def claim_signer(secret_file: Path) -> ClaimSigner:
    """An interceptor that signs our executors' task claims with the secret."""
    return ClaimSigner(secret_file)
