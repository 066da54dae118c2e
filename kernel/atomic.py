"""Crash-safe file replacement, shared by everything that persists state.

Readers (other processes, a restarted daemon) must see the old file or the new one, never a
half-written one: write a temporary file in the same folder, flush it to disk, then rename
it over the target.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it atomically becomes ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: Path, payload: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(payload)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
