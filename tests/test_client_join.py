"""``collabfl-client join`` as an operator runs it: twice, with a spent token, and with the
token where no other local user can read it.

Before, re-running the printed join line on an enrolled state dir replaced the SuperNode
key, then the spent token was refused (403): the lab was locked out until a fresh invite.
And the token was an argument (``--token cfj1.…``), readable by every local user in ``ps``
for the minutes a join retries an unreachable coordinator. Against a real gateway and
enrolment endpoint (tests/test_enrolment.py's), and the real console scripts.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from support.coordinator import FakeSigner
from test_enrolment import Coordinator, coordinator  # noqa: F401  (the fixture)
from typer.testing import CliRunner

from collabfl.cli.admin import admin_app
from collabfl.client import join
from collabfl.client.data import ArrayDataset, ClientData
from collabfl.client.data.client_file import save_client_file
from collabfl.coordinator.service import serve
from collabfl.kernel.identity import Role
from collabfl.kernel.supervisor import stop_group
from collabfl.kernel.token_source import ENV_VAR

BIN = Path(sys.executable).parent
TOKEN = "cfj1.0123abcd." + "s" * 22 + "." + "a" * 64
"""Well formed, for a coordinator that is never reached."""


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    split = ArrayDataset(rng.normal(size=(8, 1, 40)).astype(np.float32), rng.integers(0, 10, 8))
    path = tmp_path / "lab.npz"
    save_client_file(ClientData(0, split, split, split, False), path, num_classes=10, dataset="x")
    return path


def _token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def _join(address: str, token: Path, data: Path | str, state_dir: Path, *extra: str) -> int:
    return join.main([address, "--token-file", str(token), "--data", str(data),
                      "--state-dir", str(state_dir), "--no-start", *extra])  # fmt: skip


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


KEYS = ["supernode_key", "supernode_key.pub", "tls/member.key", "tls/member.pem", "tls/ca.pem"]


def test_a_rerun_join_on_an_enrolled_state_dir_changes_nothing(coordinator, data, tmp_path, capsys):  # noqa: F811
    state_dir, token = tmp_path / "state", _token_file(tmp_path, coordinator.invite(3))
    assert _join(coordinator.address, token, data, state_dir) == 0
    enrolled = _files(state_dir)
    assert set(KEYS) <= set(enrolled)
    capsys.readouterr()
    assert _join(coordinator.address, token, data, state_dir) == 2  # the printed line, again
    said = capsys.readouterr().err
    assert (
        f"already enrolled as client 3; start it with `collabfl-client --state-dir {state_dir}`"
        in said
    )
    assert _files(state_dir) == enrolled  # every key, certificate and saved flag
    assert coordinator.events("impostor") == []


def test_a_refused_re_enrolment_leaves_every_key_in_place(coordinator, data, tmp_path, capsys):  # noqa: F811
    state_dir, token = tmp_path / "state", _token_file(tmp_path, coordinator.invite(3))
    assert _join(coordinator.address, token, data, state_dir) == 0
    enrolled = _files(state_dir)
    assert _join(coordinator.address, token, data, state_dir, "--re-enrol") == 2  # spent: 403
    assert "refused the join (403)" in capsys.readouterr().err
    assert _files(state_dir) == enrolled


def test_an_accepted_re_enrolment_replaces_the_keys(coordinator, data, tmp_path):  # noqa: F811
    state_dir = tmp_path / "state"
    assert _join(coordinator.address, _token_file(tmp_path, coordinator.invite(3)), data,
                 state_dir) == 0  # fmt: skip
    old = _files(state_dir)
    coordinator.enroller.revoke(Role.MEMBER, "3")
    fresh = _token_file(tmp_path, coordinator.invite(3))
    assert _join(coordinator.address, fresh, data, state_dir, "--re-enrol") == 0
    new = _files(state_dir)
    assert all(new[name] != old[name] for name in KEYS if name != "tls/ca.pem")
    assert new["supernode_key.pub"].decode() in coordinator.superlink.registered.values()
    assert not (state_dir / join.STAGING_DIR).exists()


def test_a_token_on_the_command_line_is_refused(data, tmp_path, capsys):
    argv = [
        "127.0.0.1:1",
        "--token",
        TOKEN,
        "--data",
        str(data),
        "--state-dir",
        str(tmp_path / "s"),
    ]
    assert join.main(argv) == 2
    said = capsys.readouterr().err
    assert "--token puts the join token where every local user can read it" in said
    assert f"{ENV_VAR}=cfj1" in said and "--token-file" in said
    assert not (tmp_path / "s").exists()
    login = CliRunner().invoke(admin_app, ["login", "127.0.0.1:1", "--token", TOKEN])
    assert login.exit_code == 2 and ENV_VAR in login.output


def _wait_until(condition: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not in {limit_s} s"
        time.sleep(0.05)


def _argv_holding(token: str) -> list[str]:
    """Every process's command line on this machine that holds ``token``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if token.encode() in argv:
            found.append(argv.replace(b"\0", b" ").decode(errors="replace"))
    return found


@pytest.fixture
def retrying(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts a command that retries a coordinator it cannot reach; ends it, and what it
    started (a shell's join), after the test."""
    started: list[subprocess.Popen[bytes]] = []
    log = tmp_path / "join.log"

    def start(argv: list[str], stdin: bytes | None = None, env: dict[str, str] | None = None):
        environment = {**os.environ, **(env or {})}
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log.open("wb"),
                                   stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)  # fmt: skip
        started.append(process)
        assert process.stdin is not None
        process.stdin.write(stdin or b"")
        process.stdin.close()
        _wait_until(lambda: "cannot reach the coordinator" in log.read_text()
                    or process.poll() is not None, "the join's first retry")  # fmt: skip
        assert process.poll() is None, log.read_text()
        return process

    yield start
    for process in started:
        stop_group(process, grace_s=5.0)


@pytest.mark.parametrize("source", ["environment", "file", "stdin"])
def test_no_process_has_the_token_on_its_command_line(
    source, retrying, data, tmp_path, closed_port
):
    argv = [str(BIN / "collabfl-client"), "join", f"127.0.0.1:{closed_port}", "--data", str(data),
            "--state-dir", str(tmp_path / "state")]  # fmt: skip
    if source == "environment":
        retrying(argv, env={ENV_VAR: TOKEN})
    elif source == "file":
        retrying([*argv, "--token-file", str(_token_file(tmp_path, TOKEN))])
    else:
        retrying([*argv, "--token-file", "-"], stdin=TOKEN.encode() + b"\n")
    assert _argv_holding(TOKEN) == []


def test_the_printed_invite_line_puts_no_token_on_any_command_line(
    coordinator: Coordinator,  # noqa: F811
    retrying,
    data,
    tmp_path,
    closed_port,
):
    """The line `admin invite` prints, typed into a shell as an operator pastes it (with a
    join address nobody listens on, so that the join keeps retrying)."""
    coordinator.enroller.join_address = f"127.0.0.1:{closed_port}"
    server, port = serve(coordinator.state, FakeSigner(), enroller=coordinator.enroller)
    try:
        invited = CliRunner(env={"COLUMNS": "250"}).invoke(admin_app, [
            "--coordinator", f"127.0.0.1:{port}", "invite", "--client-id", "4", "--host",
            "127.0.0.1", "--data", str(data), "--state-dir", str(tmp_path / "state"),
        ])  # fmt: skip
    finally:
        server.stop(None)
    assert invited.exit_code == 0, invited.output
    line = invited.output.strip().splitlines()[-1]
    assignment, *words = shlex.split(line)
    name, _, token = assignment.partition("=")
    assert name == ENV_VAR and token.startswith("cfj1.")
    assert words[:2] == ["collabfl-client", "join"] and not any("cfj1" in w for w in words)
    path = f"{BIN}{os.pathsep}{os.environ['PATH']}"
    retrying(["sh"], stdin=line.encode() + b"\n", env={"PATH": path})
    assert _argv_holding(token) == []


def test_the_invite_line_leaves_the_data_to_the_lab(coordinator: Coordinator, tmp_path):  # noqa: F811
    """The coordinator cannot know where a lab keeps its data: the printed line holds DATA
    and says what the lab puts there (issue #42, 7)."""
    server, port = serve(coordinator.state, FakeSigner(), enroller=coordinator.enroller)
    try:
        invited = CliRunner(env={"COLUMNS": "250"}).invoke(admin_app, [
            "--coordinator", f"127.0.0.1:{port}", "invite", "--client-id", "4", "--host",
            "127.0.0.1",
        ])  # fmt: skip
    finally:
        server.stop(None)
    assert invited.exit_code == 0, invited.output
    *before, line = invited.output.strip().splitlines()
    assert shlex.split(line)[4:6] == ["--data", "DATA"]
    said = " ".join(" ".join(before).split())  # as read, however the console wrapped it
    assert "replaces DATA" in said and "pkg.mod:factory" in said, said


def test_a_join_with_the_placeholder_spends_nothing(coordinator, data, tmp_path, capsys):  # noqa: F811
    state_dir, token = tmp_path / "state", _token_file(tmp_path, coordinator.invite(3))
    assert _join(coordinator.address, token, Path("DATA"), state_dir) == 2
    said = capsys.readouterr().err
    assert "--data DATA: no such file" in said and "the token is unspent" in said
    assert _join(coordinator.address, token, data, state_dir) == 0


def test_a_join_takes_a_data_factory_the_lab_allows(coordinator, tmp_path, capsys):  # noqa: F811
    """`--data pkg.mod:factory` as the daemon takes it, with its --allow-import, saved for
    the daemon; without the allowance it is refused before the token is spent."""
    from collabfl.client.settings import ParticipantSettings, parser
    from collabfl.kernel.daemon_settings import load

    state_dir, token = tmp_path / "state", _token_file(tmp_path, coordinator.invite(3))
    factory = "tests.support.sources:blobs"
    assert _join(coordinator.address, token, factory, state_dir) == 2
    assert "--allow-import" in capsys.readouterr().err
    absent = "no_such_lab.data:clients"  # on no entry of the Python path
    assert _join(coordinator.address, token, absent, state_dir, "--allow-import", absent) == 2
    said = capsys.readouterr().err
    assert "PYTHONPATH" in said and "the token is unspent" in said, said
    allowed = ("--allow-import", factory)
    assert _join(coordinator.address, token, factory, state_dir, *allowed) == 0
    saved = load(ParticipantSettings, parser(), ["--state-dir", str(state_dir)])
    assert (saved.data, saved.allow_import, saved.client_id) == (factory, (factory,), 3)
