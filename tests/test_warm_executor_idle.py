"""The warm executor idles without asking its SuperNode for tasks on a clock: it watches the
SuperNode's log and asks when a "Receiving" line says a task is coming. No Flower process:
the executor's task query is replaced by a counter, the log is a file the test writes."""

from __future__ import annotations

import threading
from pathlib import Path

from collabfl.flower.processes import warm_executor_command
from collabfl.flower.warm_executor import SuperNodeLog, WarmExecutor, parser

FOREVER_S = 3600.0


class Asks:
    """Stands in for ``WarmExecutor._acquire``: never a task; each ask counted."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def __call__(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.count >= count, timeout=60)


def _serving(log: Path) -> tuple[WarmExecutor, Asks, threading.Thread]:
    # Asks every 10 ms only in a burst; the tests make idle asks an hour apart.
    executor = WarmExecutor("127.0.0.1:9", poll_s=0.01, supernode_log=log)
    asks = Asks()
    executor._acquire = asks  # type: ignore[method-assign]
    thread = threading.Thread(target=executor.serve, daemon=True)
    return executor, asks, thread


def test_an_idle_executor_asks_when_the_supernode_logs_a_message_coming(tmp_path, monkeypatch):
    monkeypatch.setattr("collabfl.flower.warm_executor.IDLE_ASK_S", FOREVER_S)
    monkeypatch.setattr("collabfl.flower.warm_executor.BURST_S", 0.0)  # no start-up burst
    log = tmp_path / "supernode.log"
    log.write_text("SuperNode ID: 1\n")
    executor, asks, thread = _serving(log)
    thread.start()
    asks.wait_for(1)  # the first ask, then it watches the log
    with log.open("a") as growing:
        growing.write("Sent successfully\n")  # growth that announces no task: no ask
        growing.flush()
        growing.write("Receiving: query.program message\n")
    asks.wait_for(2)
    executor.stopping.set()
    thread.join(timeout=60)
    executor.client.close()
    assert not thread.is_alive() and asks.count == 2


def test_the_log_watch_finds_a_line_cut_by_its_look_and_only_once(tmp_path):
    stopping = threading.Event()
    log = tmp_path / "supernode.log"
    log.write_text("old Receiving line, from before the watch\n")
    watch = SuperNodeLog(log)
    assert not watch.wait(0.05, stopping)  # what was there before does not count
    with log.open("a") as growing:
        growing.write("Recei")
    assert not watch.wait(0.05, stopping)
    with log.open("a") as growing:
        growing.write("ving: query.train message\n")
    assert watch.wait(FOREVER_S, stopping)
    assert not watch.wait(0.05, stopping)  # the same line does not count twice
    log.write_text("Receiving: after a restart, a new log\n")  # shorter: read from its start
    assert watch.wait(FOREVER_S, stopping)


def test_the_executor_command_names_the_supernode_log(tmp_path):
    command = warm_executor_command("127.0.0.1:9094", 0.1, tmp_path / "supernode.log")
    args = parser().parse_args(command[command.index("collabfl.flower.warm_executor") + 1 :])
    assert args.supernode_log == tmp_path / "supernode.log" and args.poll == 0.1
    assert "--supernode-log" not in warm_executor_command("127.0.0.1:9094")
