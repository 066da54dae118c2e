"""Crash-safe writing of ``.npz`` files.

Caches and partition files are read by other processes (client daemons, parallel runs); a
reader must never see a half-written file, so we write a temporary file beside the target
and rename it into place.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np


def save_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` (exactly that name) as an uncompressed ``.npz``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
