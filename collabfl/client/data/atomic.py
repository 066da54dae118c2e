"""Crash-safe writing of ``.npz`` files.

Caches and partition files are read by other processes (client daemons, parallel runs); a
reader must never see a half-written file, so we write a temporary file beside the target
and rename it into place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from collabfl.kernel.atomic import replacing


def save_npz_atomic(path: Path, arrays: dict[str, np.ndarray], *, shared: bool = True) -> None:
    """Write ``arrays`` to ``path`` (exactly that name) as an uncompressed ``.npz``; mode
    0600 unless ``shared`` (then as the umask allows)."""
    with replacing(path, shared=shared) as tmp, open(tmp, "wb") as f:
        np.savez(f, allow_pickle=False, **arrays)
