"""A run's folder on the coordinator machine, read for an operator who is elsewhere.

The coordinator service lists the folder and reads its files a chunk at a time
(``GetRunResults``, ``ReadRunFile``), so ``collabfl admin results`` works from a laptop. The
caller names a path; these functions are what keeps it inside the run's folder: no absolute
path, no ``..``, no symbolic link followed, regular files only. Replies stay bounded: at
most MAX_FILES listed, CHUNK_BYTES read per call, MAX_RESULTS_BYTES of the results table.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from collabfl.coordinator.store.state import InvalidRecord, NotFound, Run
from collabfl.engine.run_options import RunOptions

RESULTS_FILE = "results.md"
MAX_FILES = 10_000
"""Files listed per run: a run folder holds tens (graphs are pruned by ``retention``)."""
CHUNK_BYTES = 1024 * 1024
"""Bytes per ReadRunFile reply, well under the channel's message limit."""
MAX_RESULTS_BYTES = 256 * 1024
"""results.md is a table per method and seed; anything longer is not one."""
MAX_PATH_CHARS = 1024


@dataclass(frozen=True)
class RunFile:
    """One regular file of a run's folder: its '/'-separated path there and its size."""

    path: str
    size: int


@dataclass(frozen=True)
class RunResults:
    """A run's results table ("" until written) and the files its folder holds."""

    run_id: str
    results_md: str
    files: list[RunFile]
    truncated: bool


def run_folder(runs_dir: Path, run: Run) -> Path:
    """Where the run writes: its request's ``out_dir`` inside ``runs_dir`` (checked again
    here, as at its creation), or a folder named after it."""
    return RunOptions.from_request(run.config).run_dir(runs_dir, run.run_id)


def run_results(folder: Path, run_id: str) -> RunResults:
    """The results table and the listing; a folder not made yet lists nothing."""
    files, truncated = _listing(folder)
    table = b""
    if any(f.path == RESULTS_FILE for f in files):
        table = read_chunk(folder, RESULTS_FILE, 0, MAX_RESULTS_BYTES)[0]
    return RunResults(run_id, table.decode(errors="replace"), files, truncated)


def read_chunk(folder: Path, path: str, offset: int, limit: int = CHUNK_BYTES) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of the run's file ``path`` from ``offset``, and its size."""
    parts = _parts(path)
    descriptor = _open_inside(folder, parts)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidRecord(f"{path!r} is not a regular file of the run's folder")
        if offset >= info.st_size:
            return b"", info.st_size
        return os.pread(descriptor, min(limit, CHUNK_BYTES), offset), info.st_size
    finally:
        os.close(descriptor)


def _parts(path: str) -> list[str]:
    """The path's components; absolute paths, ``..``, ``.`` and empty parts are refused."""
    pure = PurePosixPath(path)
    parts = path.split("/")
    if (
        not path
        or len(path) > MAX_PATH_CHARS
        or "\0" in path
        or "\\" in path
        or pure.is_absolute()
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise InvalidRecord(f"{path[:100]!r} is not a path inside the run's folder")
    return parts


def _open_inside(folder: Path, parts: list[str]) -> int:
    """Open ``folder/parts...`` one component at a time, following no symbolic link, so
    no link (planted before or swapped in during the call) leads out of the folder."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        current = os.open(folder, flags | os.O_DIRECTORY)
    except FileNotFoundError:
        raise NotFound("the run has written no files yet") from None
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            opened = os.open(part, flags | (0 if last else os.O_DIRECTORY), dir_fd=current)
            os.close(current)
            current = opened
    except FileNotFoundError:
        os.close(current)
        raise NotFound(f"the run's folder holds no file {'/'.join(parts)!r}") from None
    except OSError as error:  # ELOOP (a link), ENOTDIR: nothing to read there
        os.close(current)
        raise InvalidRecord(
            f"{'/'.join(parts)!r} is not a regular file of the run's folder ({error.strerror})"
        ) from None
    return current


def _listing(folder: Path) -> tuple[list[RunFile], bool]:
    """The folder's regular files (links neither listed nor followed), sorted by path."""
    found: list[RunFile] = []
    for root, dirs, names in os.walk(folder):  # os.walk follows no link into a folder
        dirs.sort()
        for name in sorted(names):
            info = os.lstat(os.path.join(root, name))
            if stat.S_ISREG(info.st_mode):
                relative = Path(root, name).relative_to(folder).as_posix()
                found.append(RunFile(relative, info.st_size))
                if len(found) > MAX_FILES:
                    return sorted(found[:MAX_FILES], key=lambda f: f.path), True
    return sorted(found, key=lambda f: f.path), False
