"""Logs rotated by size (kernel/log_rotation.py): a daemon up for months keeps a bounded
amount of each log, its children writing on undisturbed (issue #32, soak)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from collabfl.kernel.log_rotation import rotate, rotate_copy, rotated
from collabfl.kernel.supervisor import Supervisor


def _wait(condition, what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit_s} s"
        time.sleep(0.05)


def test_a_log_is_copied_aside_and_emptied_only_past_its_size(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("a" * 10)
    assert not rotate_copy(log, max_bytes=10, keep=2)
    for text in ("b" * 11, "c" * 12, "d" * 13):
        log.write_text(text)
        assert rotate_copy(log, max_bytes=10, keep=2)
        assert log.stat().st_size == 0
    assert [p.read_text() for p in rotated(log)] == ["", "d" * 13, "c" * 12]  # b dropped
    assert not rotate_copy(tmp_path / "missing.log")


def test_a_record_file_is_moved_aside_keeping_a_bounded_number(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    for n in range(4):
        path.write_text(f"{n}\n")
        rotate(path, keep=2)
    assert [p.name for p in rotated(path)] == ["messages.jsonl.1", "messages.jsonl.2"]
    assert [p.read_text() for p in rotated(path)] == ["3\n", "2\n"]
    path.write_text("4\n")
    rotate(path, keep=0)
    assert not path.exists()


def _first_line(path: Path) -> bytes:
    return path.read_bytes().split(b"\n", 1)[0] if path.exists() else b""


def test_a_supervised_childs_log_stays_bounded_while_it_writes_on(tmp_path: Path) -> None:
    """The child holds its log open for appending: after each rotation it writes on from the
    start of the emptied file (no hole of NUL bytes), and at most ``keep`` old files stay."""
    script = "import time\nn = 0\nwhile True:\n    n += 1\n"
    script += "    print(f'line {n:06d} ' + 'x' * 80, flush=True)\n    time.sleep(0.005)\n"
    log = tmp_path / "child.log"
    oldest = tmp_path / "child.log.2"
    child = Supervisor("child", [sys.executable, "-c", script], log, log_max_bytes=4000, log_keep=2)
    child.start()
    try:
        _wait(lambda: _first_line(oldest) != b"", "two rotations")
        second = _first_line(oldest)
        _wait(lambda: _first_line(oldest) not in (b"", second), "a third, dropping the oldest")
        assert child.alive and child.restarts == 0
    finally:
        child.stop(grace_s=5)
    assert sorted(p.name for p in tmp_path.glob("child.log*")) == [
        "child.log",
        "child.log.1",
        "child.log.2",
    ]
    for path in rotated(log):
        lines = path.read_bytes().splitlines()
        assert all(line.startswith(b"line ") for line in lines), path  # no NUL hole
        numbers = [int(line.split()[1]) for line in lines]
        assert numbers == sorted(numbers)  # a stretch of the child's output, in order
