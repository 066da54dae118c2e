"""The ServerApp template: each ServerApp is a fork of a process that imported it once, runs
Flower's real ``flwr-serverapp`` entry point with the launcher's flags, writes its own log,
reports its exit code, inherits the coordinator's environment, and never shows its token
file on a command line."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collabfl.flower.serverapp_template import ForkedServerApp, ServerAppTemplate
from collabfl.kernel.leftovers import OWNER_VARIABLE

MARKER_MODULE = "tests.support.import_marker"
PATIENCE_S = 300.0
"""For the template's imports on a loaded machine; the tests wait for what they watch."""


@pytest.fixture
def template(tmp_path: Path) -> Iterator[ServerAppTemplate]:
    env = {
        **os.environ,
        "COLLABFL_IMPORT_MARKER": str(tmp_path / "imports"),
        OWNER_VARIABLE: "1:1:/somewhere",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    started = ServerAppTemplate([MARKER_MODULE], env, tmp_path / "template.log")
    started.start()
    yield started
    started.stop()


def _hanging_serverapp(tmp_path: Path) -> list[str]:
    """Flags of a ServerApp that retries a closed port until it is stopped."""
    token = tmp_path / "task.token"
    token.write_text("not-a-real-token")
    return [
        "--runtime-api-address", "127.0.0.1:9", "--token-file", str(token), "--insecure",
        "--parent-pid", str(os.getpid()),
    ]  # fmt: skip


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_each_serverapp_is_a_fork_of_one_import(template, tmp_path):
    first = template.fork(["--help"], tmp_path / "one.log", PATIENCE_S)
    second = template.fork(["--no-such-flag"], tmp_path / "two.log", PATIENCE_S)

    assert first.wait(PATIENCE_S) == 0
    assert second.wait(PATIENCE_S) == 2  # argparse's usage error, as the real command exits
    assert "--runtime-api-address" in (tmp_path / "one.log").read_text()
    assert "flwr-serverapp: error:" in (tmp_path / "two.log").read_text()
    imports = (tmp_path / "imports").read_text().splitlines()
    assert template._process is not None
    assert imports == [str(template._process.pid)]  # imported once, by the template
    assert first.pid != second.pid


def test_a_serverapp_is_stopped_by_its_handle_and_hides_its_token_file(template, tmp_path):
    child = template.fork(_hanging_serverapp(tmp_path), tmp_path / "run.log", PATIENCE_S)
    log = tmp_path / "run.log"
    _wait_for(lambda: log.exists() and "Start `flwr-serverapp`" in log.read_text(), "no start")

    command = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")
    environ = Path(f"/proc/{child.pid}/environ").read_bytes().split(b"\0")
    assert child.poll() is None
    child.terminate()
    code = child.wait(PATIENCE_S)

    assert code != 0 or "Task stopped" in (tmp_path / "run.log").read_text()
    assert not any(b"token" in part for part in command), command
    assert f"{OWNER_VARIABLE}=1:1:/somewhere".encode() in environ  # leftovers find it
    assert not Path(f"/proc/{child.pid}").exists() or child.poll() is not None


def test_a_child_outlives_a_dead_template_and_still_reads_as_ended(template, tmp_path):
    child = template.fork(_hanging_serverapp(tmp_path), tmp_path / "run.log", PATIENCE_S)
    template.stop()  # the coordinator went away: the template ends, its ServerApp does not

    assert child.poll() is None
    os.kill(child.pid, 9)
    _wait_for(lambda: child.poll() is not None, "a killed orphan still reads as running")
    assert child.poll() == -1  # no parent of ours was left to report its code


def test_a_pid_reused_after_the_child_ended_is_never_signalled(tmp_path):
    gone = ForkedServerApp(os.getpid())
    gone.started = -1  # as if our own pid had been reused after the child ended
    gone.orphaned = True  # and its template had gone, so that no exit was reported

    gone.terminate()  # would be SIGTERM to this test's process

    assert gone.poll() == -1


def test_a_template_that_died_is_started_again_for_the_next_serverapp(template, tmp_path):
    assert template._process is not None
    first = template._process
    first.kill()
    first.wait()

    child = template.fork(["--help"], tmp_path / "after.log", PATIENCE_S)

    assert child.wait(PATIENCE_S) == 0
    assert template._process is not None and template._process.pid != first.pid


def test_stopping_ends_a_template_still_importing_and_the_claim_waiting_on_it(tmp_path):
    env = {
        **os.environ,
        "COLLABFL_IMPORT_MARKER": str(tmp_path / "imports"),
        "COLLABFL_IMPORT_DELAY": "3600",  # an import that would hold a claim for an hour
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    template = ServerAppTemplate([MARKER_MODULE], env, tmp_path / "template.log")
    template.start()
    _wait_for(lambda: (tmp_path / "imports").exists(), "the template never began importing")
    outcome: list[BaseException | ForkedServerApp] = []

    def claim() -> None:
        try:
            outcome.append(template.fork(["--help"], tmp_path / "never.log", 3600))
        except RuntimeError as error:
            outcome.append(error)

    waiting = threading.Thread(target=claim, daemon=True)
    waiting.start()
    stopping = threading.Thread(target=template.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=PATIENCE_S)
    waiting.join(timeout=PATIENCE_S)

    assert not stopping.is_alive(), "stop waits for the template's imports"
    assert not waiting.is_alive(), "the claim still waits on a stopped template"
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError), outcome
    assert not (tmp_path / "never.log").exists()
