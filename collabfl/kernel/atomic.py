"""Crash-safe file replacement, shared by everything that persists state.

Readers (other processes, a restarted daemon) must see the old file or the new one, never a
half-written one: write a temporary file in the same folder, flush it to disk, then rename
it over the target. The file gets the permissions a plain ``open`` would give it (0666 less
the process umask), so results are as readable as the user's other files; ``private`` files
(a participant's model state) are 0600.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PRIVATE_MODE = 0o600


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o077)  # elsewhere: set and restore (briefly process-wide)
    os.umask(mask)
    return mask


@contextmanager
def replacing(path: Path, private: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write; on success it atomically becomes ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fchmod(handle.fileno(), PRIVATE_MODE if private else 0o666 & ~current_umask())
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: Path, payload: bytes, private: bool = False) -> None:
    with replacing(path, private) as tmp:
        tmp.write_bytes(payload)


def write_text(path: Path, text: str, private: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), private)


def keep_private(state_dir: Path) -> None:
    """Make everything this process and its children create from now on readable by its
    user only (umask 077), and ``state_dir`` a 0700 folder.

    A daemon's state derives from private data or grants access (published models, node
    state, data copies, databases holding run tickets, keys), and Flower's processes it starts
    write their files with the umask they inherit: one setting covers them all.
    """
    os.umask(0o077)
    state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o700)
