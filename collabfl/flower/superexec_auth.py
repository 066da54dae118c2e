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

SECRET_FILE = "superexec.secret"
CLAIM_METHODS = frozenset({"/flwr.proto.Runtime/AcquireTask"})
"""The runtime API calls Flower guards with the secret: claiming a task and its token."""


def ensure_secret(state_dir: Path) -> Path:
    """The state dir's secret file, made (32 random bytes, 0600) if it does not exist."""
    path = state_dir / SECRET_FILE
    if not path.exists():
        write_bytes(path, secrets.token_bytes(32))  # 0600
    return path


def claim_signer(secret_file: Path) -> SuperExecAuthHttpInterceptor:
    """An interceptor that signs our executors' task claims with the secret."""
    # flwr loads here, not where the client daemon imports ensure_secret: the daemon stays
    # free of flwr (and numpy), which only its executor needs
    from flwr.supercore.interceptors.http.superexec_auth import SuperExecAuthHttpInterceptor

    return SuperExecAuthHttpInterceptor(
        master_secret=secret_file.read_bytes(), protected_methods=CLAIM_METHODS
    )
