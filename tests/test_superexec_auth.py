"""Flower's SuperExec authentication, as the coordinator and the client daemon use it.

A real SuperLink in ``--isolation process`` with a secret file hands a task claim only to a
caller that signs it (flower/superexec_auth.py); the ServerApp launcher relies on Flower's
``flwr-serverapp --token-file`` and the symbols below. An upgrade that drops or reshapes any
of them fails here by name, not as a federation whose runs never start.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from collabfl.flower.processes import flower_binary
from tests.support.flower_api import assert_flower_has
from tests.support.task_claims import claim_task, superexec_superlink

pytestmark = pytest.mark.federation

USED = [
    ("flwr.supercore.interceptors.http.superexec_auth", "SuperExecAuthHttpInterceptor",
     ["master_secret", "protected_methods"]),
    ("flwr.supercore.runtime", "RuntimeHttpClient.from_server_address",
     ["server_address", "insecure", "root_certificates", "interceptors", "retry_invoker"]),
    ("flwr.proto.runtime_pb2", "AcquireTaskRequest", ["supported_task_types"]),
    ("flwr.proto.runtime_pb2", "AcquireTaskResponse", ["task", "token"]),
    ("flwr.proto.task_pb2", "Task", ["task_id", "run_id"]),
]  # fmt: skip


@pytest.mark.parametrize(("module", "symbol", "parameters"), USED, ids=[u[1] for u in USED])
def test_the_launchers_use_flower_as_it_is(module, symbol, parameters):
    assert_flower_has(module, symbol, parameters, "the SuperExec secret's users")


@pytest.mark.parametrize(
    ("program", "flags"),
    [
        ("flower-superlink", ["--isolation", "--superexec-auth-secret-file"]),
        ("flower-supernode", ["--isolation", "--superexec-auth-secret-file"]),
        ("flwr-serverapp", ["--token-file", "--runtime-api-address", "--parent-pid"]),
    ],
)
def test_flower_programs_take_the_flags_we_pass(program: str, flags: list[str]) -> None:
    shown = subprocess.run(
        [flower_binary(program), "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    assert all(flag in shown for flag in flags), f"{program} --help lacks one of {flags}"


def test_a_superlink_with_the_secret_answers_only_signed_claims(tmp_path: Path) -> None:
    with superexec_superlink(tmp_path) as (superlink, address, secret):
        assert secret.stat().st_mode & 0o777 == 0o600
        deadline = time.monotonic() + 120
        signed = claim_task(address, secret=secret)
        while signed.startswith("refused") and time.monotonic() < deadline:
            assert superlink.poll() is None, (tmp_path / "superlink.log").read_text()
            time.sleep(0.5)  # still starting
            signed = claim_task(address, secret=secret)
        unsigned = claim_task(address)
    assert signed == "answered: token ''", signed  # no task yet, but the claim is accepted
    assert "401" in unsigned, unsigned
