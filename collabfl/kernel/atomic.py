"""Crash-safe file replacement: the one way a file that matters is written.

Readers (other processes, a restarted daemon) must see the old file or the new one, never a
half-written one, and a file reported written must survive a power cut: write a temporary
file in the same folder, flush it to disk, rename it over the target, then flush the folder
so that the rename itself is on disk. Files are 0600 unless ``shared``: state (keys,
checkpoints, session state, published models, enrolment, saved arguments) derives from
private data or grants access; ``shared`` outputs (results, reports, certificates, public
keys) get the permissions a plain ``open`` would give them (0666 less the umask).

tests/test_state_writes.py fails on any other way of writing a file in the product source,
save the outputs it lists.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PRIVATE_MODE = 0o600
_TEMP_SUFFIX = ".tmp"


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
def replacing(path: Path, *, shared: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write; on success it atomically and durably becomes ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TEMP_SUFFIX)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fchmod(handle.fileno(), 0o666 & ~current_umask() if shared else PRIVATE_MODE)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def write_bytes(path: Path, payload: bytes, *, shared: bool = False) -> None:
    with replacing(path, shared=shared) as tmp:
        tmp.write_bytes(payload)


def write_text(path: Path, text: str, *, shared: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), shared=shared)


def sync_folder(folder: Path) -> None:
    """Flush ``folder``'s entries (a rename, a new file) to disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_leftovers(folder: Path) -> None:
    """Delete the temporary files of writes into ``folder`` that a crash interrupted.

    Only for a folder whose writer is this process: another's write in progress would fail.
    """
    for leftover in folder.glob(f".*{_TEMP_SUFFIX}"):
        leftover.unlink(missing_ok=True)


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
