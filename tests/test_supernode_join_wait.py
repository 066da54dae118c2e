"""A client daemon starts its warm executor once its SuperNode has joined (or a bound has
passed): ``wait_for_join`` reads the SuperNode's log only when it grows."""

from __future__ import annotations

import threading
import time

from collabfl.flower.processes import SUPERNODE_CONNECTED, wait_for_join


def _append_later(path, text: str, after_s: float) -> threading.Thread:
    def write() -> None:
        time.sleep(after_s)
        with path.open("a") as log:
            log.write(text)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_returns_once_the_supernode_logs_that_it_joined(tmp_path):
    log = tmp_path / "supernode.log"
    writer = _append_later(log, f"INFO: Starting\nINFO: {SUPERNODE_CONNECTED} 123\n", 0.2)
    started = time.monotonic()
    assert wait_for_join(log, 60.0, threading.Event())
    assert time.monotonic() - started < 30.0  # long before the bound
    writer.join()


def test_other_lines_do_not_count_and_the_bound_ends_the_wait(tmp_path):
    log = tmp_path / "supernode.log"
    log.write_text("INFO: Starting Flower SuperNode\nWARNING: Connection attempt failed\n")
    assert not wait_for_join(log, 0.3, threading.Event())


def test_a_log_that_is_never_written_ends_the_wait_at_the_bound(tmp_path):
    assert not wait_for_join(tmp_path / "missing.log", 0.2, threading.Event())


def test_a_line_from_before_a_restart_counts(tmp_path):
    log = tmp_path / "supernode.log"
    log.write_text(f"INFO: {SUPERNODE_CONNECTED} 42\nINFO: Starting Flower SuperNode\n")
    started = time.monotonic()
    assert wait_for_join(log, 60.0, threading.Event())
    assert time.monotonic() - started < 30.0


def test_a_stop_ends_the_wait(tmp_path):
    stopping = threading.Event()
    stopping.set()
    started = time.monotonic()
    assert not wait_for_join(tmp_path / "supernode.log", 60.0, stopping)
    assert time.monotonic() - started < 30.0
