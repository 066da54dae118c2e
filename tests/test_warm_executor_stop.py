"""A stopped executor says so and exits at once, without the interpreter's teardown.

The teardown of a heap holding torch, Flower and a run's models cost an executor about a
CPU-second; 32 executors stopping together on two cores outlasted their daemons' grace and
were killed. A real executor process is started with its SuperNode absent, so that it sits
in Flower's runtime API client, which retries for as long as the SuperNode is away, and is
stopped as its daemon stops it, with SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from collabfl.flower.warm_executor import WarmExecutor

pytestmark = pytest.mark.federation

# Registers an exit handler the interpreter's teardown would run, then runs the executor.
EXECUTOR = """
import atexit, pathlib, sys
atexit.register(pathlib.Path(sys.argv[1]).write_text, "torn down")
from collabfl.flower.warm_executor import main
main(sys.argv[2:])
"""


def test_a_stopped_executor_says_so_and_skips_the_teardown(tmp_path: Path) -> None:
    marker = tmp_path / "teardown"
    command = [sys.executable, "-c", EXECUTOR, str(marker), "--runtime-api", "127.0.0.1:9"]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as executor:
        assert executor.stderr is not None
        for line in executor.stderr:  # follows its progress: stopped once it serves
            if "serving 127.0.0.1:9" in line:
                break
        else:
            raise AssertionError(f"the executor exited with {executor.wait()} before serving")
        executor.send_signal(signal.SIGTERM)
        try:
            code = executor.wait(timeout=120)  # on a loaded machine too: it has no task
        except subprocess.TimeoutExpired:
            executor.kill()
            code = None
        rest = executor.stderr.read()
    assert code == 0, f"exit status {code}: {rest[-2000:]}"
    assert not marker.exists(), "the interpreter's teardown ran"
    assert "stopped serving 127.0.0.1:9" in rest and "Traceback" not in rest


def test_a_stop_during_a_task_lets_the_task_finish(monkeypatch) -> None:
    executor = WarmExecutor("127.0.0.1:9", poll_s=0.01)
    served: list[str] = []

    def serve_one(token: str) -> None:
        executor.stop()  # as SIGTERM would, mid-task: must not exit here
        served.append(token)

    monkeypatch.setattr(executor, "_acquire", lambda: "task-1")
    monkeypatch.setattr(executor, "serve_one", serve_one)
    executor.serve()  # returns once the task is done: the stop was honoured after it
    executor.client.close()
    assert served == ["task-1"] and executor.stopping.is_set() and not executor.busy
