"""A client daemon's published models on disk, one safetensors file per round.

The peer server streams these files as they are, so what is on disk is exactly what goes on
the wire. Files are written atomically (temporary file in the same folder, fsync, rename), so
a fetcher or a restarted daemon sees either a complete round or none; only the last few
rounds are kept, because peers fetch the current one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

log = logging.getLogger(__name__)

TENSOR_NAME = "weights"
_ROUND_FILE = re.compile(r"round_(\d{6,})\.safetensors")
_TEMP_PREFIX = ".publishing-"
_HASH_BLOCK = 1 << 20


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str
    """safetensors dtype name, e.g. "F32"."""


@dataclass(frozen=True)
class StoredModel:
    """What a manifest says about one published round's file."""

    round: int
    byte_size: int
    sha256: str
    tensors: tuple[TensorInfo, ...]
    num_samples: int | None


class DiskModelStore:
    """Publishes one owner's flat model per round under ``root``; a ``ModelPublisher``."""

    def __init__(self, root: Path, owner: int, keep_rounds: int = 3) -> None:
        if keep_rounds < 1:
            raise ValueError(f"keep_rounds must be >= 1, got {keep_rounds}")
        self.root = root
        self.owner = owner
        self.keep_rounds = keep_rounds
        self._digests: dict[Path, tuple[tuple[int, int, int], str]] = {}
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.glob(_TEMP_PREFIX + "*"):
            leftover.unlink()  # an interrupted publish; never visible as a round

    def path(self, round_index: int) -> Path:
        """Where round ``round_index`` lives (whether or not it was published)."""
        if round_index < 0:
            raise ValueError(f"round must be >= 0, got {round_index}")
        return self.root / f"round_{round_index:06d}.safetensors"

    def rounds(self) -> list[int]:
        """Published rounds, oldest first."""
        found = (_ROUND_FILE.fullmatch(p.name) for p in self.root.iterdir())
        return sorted(int(match.group(1)) for match in found if match)

    def latest_round(self) -> int | None:
        rounds = self.rounds()
        return rounds[-1] if rounds else None

    def publish(
        self,
        owner: int,
        round_index: int,
        vector: torch.Tensor,
        num_samples: int | None = None,
    ) -> None:
        """Write ``vector`` (1-D float32) as round ``round_index``, then prune old rounds."""
        if owner != self.owner:
            raise ValueError(f"this store publishes for client {self.owner}, not {owner}")
        if vector.dtype != torch.float32 or vector.dim() != 1:
            raise ValueError(
                f"expected a 1-D float32 vector, got {vector.dtype} {tuple(vector.shape)}"
            )
        target = self.path(round_index)
        metadata = {"owner": str(owner), "round": str(round_index)}
        if num_samples is not None:
            metadata["num_samples"] = str(num_samples)
        weights = vector.detach().to("cpu").contiguous()
        payload = save({TENSOR_NAME: weights}, metadata=metadata)
        fd, temp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=self.root)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(payload)
                file.flush()
                os.fsync(file.fileno())
            os.chmod(temp, 0o644)  # mkstemp makes 0600; peers read through the server anyway
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        self._sync_root()
        self._digests[target] = (_identity(target), hashlib.sha256(payload).hexdigest())
        self._prune()

    def describe(self, round_index: int) -> StoredModel:
        """The manifest facts of a published round. Raises FileNotFoundError if there is none."""
        path = self.path(round_index)
        with safe_open(path, framework="pt") as file:
            metadata = file.metadata() or {}
            slices = [(name, file.get_slice(name)) for name in file.keys()]  # noqa: SIM118
            tensors = tuple(
                TensorInfo(name, tuple(part.get_shape()), part.get_dtype()) for name, part in slices
            )
        samples = metadata.get("num_samples")
        return StoredModel(
            round=round_index,
            byte_size=path.stat().st_size,
            sha256=self.digest(round_index),
            tensors=tensors,
            num_samples=int(samples) if samples is not None else None,
        )

    def digest(self, round_index: int) -> str:
        """SHA-256 of the round's file, cached while the file is unchanged."""
        path = self.path(round_index)
        identity = _identity(path)
        cached = self._digests.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
        sha = hashlib.sha256()
        with path.open("rb") as file:
            while block := file.read(_HASH_BLOCK):
                sha.update(block)
        self._digests[path] = (identity, sha.hexdigest())
        return sha.hexdigest()

    def load(self, round_index: int) -> torch.Tensor:
        """The published vector of ``round_index`` (safetensors: no code is run on load)."""
        tensors = load_file(self.path(round_index))
        if set(tensors) != {TENSOR_NAME}:
            raise ValueError(f"round {round_index} holds {sorted(tensors)}, not [{TENSOR_NAME!r}]")
        return tensors[TENSOR_NAME]

    def _prune(self) -> None:
        for old in self.rounds()[: -self.keep_rounds]:
            path = self.path(old)
            path.unlink(missing_ok=True)
            self._digests.pop(path, None)
            log.debug("pruned round %s of client %s", old, self.owner)

    def _sync_root(self) -> None:
        """Make the rename durable: fsync the folder that holds the new entry."""
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _identity(path: Path) -> tuple[int, int, int]:
    """Changes whenever the file is replaced or rewritten (inode, size, mtime)."""
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns
