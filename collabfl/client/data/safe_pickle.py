"""Unpickling that can only rebuild plain containers and numpy arrays.

The CIFAR-10 batches are distributed as pickles, and a pickle can call any importable
function while it loads. A user-supplied file is untrusted input, so only the few globals
that array pickles reference are resolvable; anything else is refused before it runs.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, BinaryIO

_ALLOWED_GLOBALS = frozenset(
    {
        # numpy array reconstruction: the 1.x module names (the real CIFAR-10 files, written
        # by Python 2) and the 2.x names (files re-written by a current numpy).
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        # Python 3 writes bytes objects this way under pickle protocols 0-2.
        ("_codecs", "encode"),
    }
)


class ForbiddenGlobalError(pickle.UnpicklingError):
    """The pickle asked for a global outside the allowlist; nothing of it was run."""


class _ArrayUnpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, path: Path) -> None:
        # latin1 lets numpy rebuild arrays that Python 2 pickled as byte strings.
        super().__init__(file, encoding="latin1")
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise ForbiddenGlobalError(f"{self._path}: refusing to load global {module}.{name}")
        return super().find_class(module, name)


def load_array_pickle(path: Path) -> Any:
    """Unpickle ``path`` allowing only builtin containers, scalars and numpy arrays.

    Raises ``ForbiddenGlobalError`` (an ``UnpicklingError``) for any other global.
    """
    with open(path, "rb") as f:
        return _ArrayUnpickler(f, path).load()
