"""Which pool samples each client holds, and the file format that pins it down.

A partition is only index arrays into a ``DataPool``, so it is small, can be saved once and
handed to every runtime (in-process or a client daemon on another machine), and two methods
compared on the same file see exactly the same client data.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import save_npz_atomic

FORMAT = "collabfl.partition/1"
_SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class ClientSplit:
    """One client's samples as indices: ``train``/``val`` into ``pool.train``, ``test`` into
    ``pool.test``.

    A client with a ``label_permutation`` reads labels as ``perm[y]`` in all three splits: a
    concept-shift client (honest) or a label-flipped one, which is also ``malicious``. A
    client with ``rotation_degrees`` sees every input turned by that angle (feature shift).
    """

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    label_permutation: np.ndarray | None = None
    malicious: bool = False
    rotation_degrees: float | None = None

    def __eq__(self, other: object) -> bool:
        # Field-wise == would compare arrays elementwise and fail on truth testing.
        if not isinstance(other, ClientSplit):
            return NotImplemented
        mine, theirs = self.label_permutation, other.label_permutation
        if mine is None or theirs is None:
            same_perm = mine is None and theirs is None
        else:
            same_perm = np.array_equal(mine, theirs)
        return (
            same_perm
            and self.malicious == other.malicious
            and self.rotation_degrees == other.rotation_degrees
            and all(np.array_equal(getattr(self, s), getattr(other, s)) for s in _SPLITS)
        )


@dataclass(frozen=True)
class Partition:
    """Every client's split plus ``meta``: scheme, parameters, seed and pool, as JSON data."""

    clients: list[ClientSplit]
    meta: dict[str, Any]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return self.meta == other.meta and self.clients == other.clients

    def save(self, path: Path) -> None:
        """Write one ``.npz`` (no pickled objects; ``meta`` is embedded as a JSON string)."""
        arrays: dict[str, np.ndarray] = {
            "format": np.asarray(FORMAT),
            "meta": np.asarray(json.dumps(self.meta, sort_keys=True)),
        }
        for split in _SPLITS:
            parts = [getattr(c, split) for c in self.clients]
            arrays[f"{split}_indices"] = np.concatenate([np.zeros(0, np.int64), *parts])
            arrays[f"{split}_offsets"] = np.cumsum([0] + [len(p) for p in parts], dtype=np.int64)
        arrays["malicious"] = np.asarray([c.malicious for c in self.clients], dtype=bool)
        arrays["permuted"] = np.asarray(
            [c.label_permutation is not None for c in self.clients], dtype=bool
        )
        arrays["rotation_degrees"] = np.asarray(
            [np.nan if c.rotation_degrees is None else c.rotation_degrees for c in self.clients],
            dtype=np.float64,
        )
        perms = [c.label_permutation for c in self.clients if c.label_permutation is not None]
        arrays["label_permutations"] = (
            np.stack(perms).astype(np.int64) if perms else np.zeros((0, 0), dtype=np.int64)
        )
        save_npz_atomic(Path(path), arrays)

    @classmethod
    def load(cls, path: Path) -> Partition:
        """Read a file written by ``save``; ``ValueError`` if it is anything else."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as f:
                arrays = {key: f[key] for key in f.files}
        except FileNotFoundError:
            raise
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: not a partition file ({e})") from e
        fmt = arrays.get("format")
        if fmt is None or fmt.shape != () or fmt.item() != FORMAT:
            raise ValueError(f"{path}: not a partition file (expected format {FORMAT!r})")
        return cls(clients=_clients_from_arrays(path, arrays), meta=_meta(path, arrays))


def _meta(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    if "meta" not in arrays:
        raise ValueError(f"{path}: partition file lacks 'meta'")
    try:
        meta = json.loads(str(arrays["meta"].item()))
    except (json.JSONDecodeError, ValueError) as e:
        raise ValueError(f"{path}: 'meta' is not a JSON object") from e
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: 'meta' is not a JSON object")
    return meta


def _clients_from_arrays(path: Path, arrays: dict[str, np.ndarray]) -> list[ClientSplit]:
    required = [f"{s}_{k}" for s in _SPLITS for k in ("indices", "offsets")]
    missing = [k for k in (*required, "malicious", "label_permutations") if k not in arrays]
    if missing:
        raise ValueError(f"{path}: partition file lacks {', '.join(missing)}")
    malicious = arrays["malicious"]
    if malicious.dtype != bool or malicious.ndim != 1:
        raise ValueError(f"{path}: 'malicious' must be a 1-D boolean array")
    n = len(malicious)
    # Files from before concept shift have no 'permuted': only label flips permuted labels.
    permuted = arrays.get("permuted", malicious)
    if permuted.dtype != bool or permuted.shape != (n,):
        raise ValueError(f"{path}: 'permuted' must be a boolean array with one entry per client")
    rotations = arrays.get("rotation_degrees", np.full(n, np.nan))
    if rotations.dtype.kind != "f" or rotations.shape != (n,):
        raise ValueError(f"{path}: 'rotation_degrees' must be a float array, one per client")
    per_split: dict[str, list[np.ndarray]] = {}
    for split in _SPLITS:
        idx, off = arrays[f"{split}_indices"], arrays[f"{split}_offsets"]
        if (
            off.shape != (n + 1,)
            or off[0] != 0
            or off[-1] != len(idx)
            or np.any(np.diff(off) < 0)
            or idx.ndim != 1
        ):
            raise ValueError(f"{path}: inconsistent '{split}' offsets for {n} clients")
        per_split[split] = np.split(idx.astype(np.int64), off[1:-1])
    perms = arrays["label_permutations"]
    if perms.ndim != 2 or len(perms) != int(permuted.sum()):
        raise ValueError(f"{path}: expected one label permutation per permuted client")
    perm_of = iter(perms.astype(np.int64))
    return [
        ClientSplit(
            train=per_split["train"][k],
            val=per_split["val"][k],
            test=per_split["test"][k],
            label_permutation=next(perm_of) if permuted[k] else None,
            malicious=bool(malicious[k]),
            rotation_degrees=None if np.isnan(rotations[k]) else float(rotations[k]),
        )
        for k in range(n)
    ]
