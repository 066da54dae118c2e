"""Bounding what only ever grows: append-only logs and records, rotated by size.

A file is rotated into ``name.1`` (``.1`` into ``.2``, ...), at most ``keep`` old files
kept. Our own appenders rotate by renaming (``rotate``): their next append starts a new
file. A child process writing its output straight into its log holds the file open, so the
log is copied away and then emptied in place (``rotate_copy``); the child opened it for
appending, so it writes on from the start. What it writes between the copy and the emptying
is lost: a line or two at most, once per rotation (logrotate's copytruncate takes the same
risk). Logs and diagnostic records only: a state file is never rotated (kernel/atomic.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LOG_MAX_BYTES = 16 << 20
"""A process's log is rotated once it passes this size."""
LOG_KEEP = 3
"""Rotated files kept per log: at most (1 + LOG_KEEP) × LOG_MAX_BYTES of it on disk."""


def _shift(path: Path, keep: int) -> None:
    """Make room for a new ``path.1``: drop ``path.<keep>``, move the others up by one."""
    for n in range(keep, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if n == keep:
            older.unlink(missing_ok=True)
        elif older.exists():
            os.replace(older, path.with_name(f"{path.name}.{n + 1}"))


def rotate(path: Path, keep: int) -> None:
    """Move ``path`` to ``path.1``, keeping ``keep`` rotated files (0: just remove it)."""
    _shift(path, keep)
    if keep:
        os.replace(path, path.with_name(f"{path.name}.1"))
    else:
        path.unlink(missing_ok=True)


def rotate_copy(path: Path, max_bytes: int = LOG_MAX_BYTES, keep: int = LOG_KEEP) -> bool:
    """Rotate a log a running process appends to, if it passed ``max_bytes``: copy it to
    ``path.1`` and empty it in place. Returns whether it did."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
        _shift(path, keep)
        if keep:
            shutil.copyfile(path, path.with_name(f"{path.name}.1"))
        os.truncate(path, 0)
    except FileNotFoundError:
        return False
    return True


def rotated(path: Path) -> list[Path]:
    """``path`` and its rotated files that exist, newest first."""
    older = sorted(
        (p for p in path.parent.glob(f"{path.name}.*") if p.suffix[1:].isdigit()),
        key=lambda p: int(p.suffix[1:]),
    )
    return [p for p in (path, *older) if p.exists()]
