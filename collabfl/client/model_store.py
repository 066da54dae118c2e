"""A client daemon's published models on disk: one folder per run, one file per round.

The peer server streams these files as they are, so what is on disk is exactly what goes on
the wire. Files are written through kernel/atomic.py (0600, synced, renamed into place), so a
fetcher or a restarted daemon sees either a complete round or none; only the last few
rounds of a run are kept, because peers fetch the current one. Runs never share a folder:
pruning one run's old rounds cannot touch another run's, whatever their round numbers.

The BLAKE3 digest of the weights is recorded in the file's metadata when it is published and
checked again when the peer server first serves the file, while it is read for sending (no
pass of its own): a file that rotted or was altered on disk (even into other finite values)
before it went out fails before its last chunk leaves, instead of being handed out as this
client's. Later fetches of the same unchanged file (every fetcher of a round reads it) skip
that hash: the fetcher checks the same digest end to end anyway, so damage after the first
serve still never reaches a peer's aggregate, and the owner hashes a round once, not once
per fetcher.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from collabfl.client.background_hash import DIGEST_NAME, BackgroundDigest, weights_digest
from collabfl.kernel.atomic import remove_leftovers, write_bytes, write_text

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

PUBLISHED_DIR = "published"
"""The folder of a client's state directory that holds its published models."""
TENSOR_NAME = "weights"
WEIGHTS_DIGEST = "weights_blake3"
"""Metadata key of the weights' BLAKE3 digest, recorded at publish time."""
RUN_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A run id usable as a folder name: no separators, no leading dot (so never "..")."""
_MAX_HEADER_BYTES = 1 << 20
_ROUND_FILE = re.compile(r"round_(\d{6,})\.safetensors")
_LAUNCH_FILE = ".launch"
"""Names the Flower run (the launch) of the run that this owner joined last."""
_LENGTH_BYTES = 8


class CorruptModel(Exception):
    """A published file no longer is what was published; it must not be served."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str
    """safetensors dtype name, e.g. "F32"."""


@dataclass(frozen=True)
class StoredModel:
    """What a manifest says about one published round's file (read from its header)."""

    round: int
    byte_size: int
    weights_digest: str
    """The digest of the tensor bytes recorded at publish."""
    tensors: tuple[TensorInfo, ...]
    num_samples: int | None


FileIdentity = tuple[str, int, int, int, int, int]
"""A file as served: (path, device, inode, size, mtime_ns, ctime_ns) of the open handle."""


class VerifiedFiles:
    """The published files whose weights matched their recorded digest when served in full.

    Keyed by the identity of the open file, so a republished round (a new file renamed into
    place) or a file written to in place (its mtime and ctime change) is checked again.
    Bounded: the oldest entries go first, which at worst costs one more hash. Thread-safe,
    because the peer server serves fetches on a thread pool.
    """

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._files: OrderedDict[FileIdentity, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, identity: object) -> bool:
        with self._lock:
            return identity in self._files

    def add(self, identity: FileIdentity) -> None:
        with self._lock:
            self._files[identity] = None
            self._files.move_to_end(identity)
            while len(self._files) > self.capacity:
                self._files.popitem(last=False)


class DiskModelStore:
    """Publishes one owner's flat model per round under ``root``; a ``ModelPublisher``.

    ``read_only`` is the peer server's view: it creates and cleans nothing, so it never
    removes the temporary file of a publish in progress in the ClientApp's process.
    ``verified`` remembers, across stores of one serving process, which files already
    passed their digest check (None: check on every serve).
    """

    def __init__(
        self,
        root: Path,
        owner: int,
        keep_rounds: int = 3,
        *,
        read_only: bool = False,
        verified: VerifiedFiles | None = None,
    ) -> None:
        if keep_rounds < 1:
            raise ValueError(f"keep_rounds must be >= 1, got {keep_rounds}")
        self.root = root
        self.owner = owner
        self.keep_rounds = keep_rounds
        self.read_only = read_only
        self.verified = verified
        if read_only:
            return
        root.mkdir(parents=True, exist_ok=True)
        remove_leftovers(root)  # an interrupted publish; never visible as a round

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
        import torch  # here, not at the top: serving needs no torch (the daemon loads none)
        from safetensors.torch import save

        if self.read_only:
            raise PermissionError(f"the store in {self.root} is read-only")
        if owner != self.owner:
            raise ValueError(f"this store publishes for client {self.owner}, not {owner}")
        if vector.dtype != torch.float32 or vector.dim() != 1:
            raise ValueError(
                f"expected a 1-D float32 vector, got {vector.dtype} {tuple(vector.shape)}"
            )
        target = self.path(round_index)
        weights = vector.detach().to("cpu").contiguous()
        metadata = {"owner": str(owner), "round": str(round_index)}
        if num_samples is not None:
            metadata["num_samples"] = str(num_samples)
        metadata[WEIGHTS_DIGEST] = weights_digest(weights.numpy().data.cast("B"))
        # 0600: the weights derive from private data, and peers read them through the server
        # (under grants), never from the file.
        write_bytes(target, save({TENSOR_NAME: weights}, metadata=metadata))
        self._prune()

    def launch(self) -> str | None:
        """The launch this owner joined the run in last (None: not recorded)."""
        try:
            return (self.root / _LAUNCH_FILE).read_text()
        except OSError:
            return None

    def awaits(self, round_index: int) -> bool:
        """Whether ``round_index`` may still be published: it is past every published round."""
        latest = self.latest_round()
        return latest is None or round_index > latest

    def open_round(self, round_index: int) -> PublishedRound:
        """The round's file, open for serving, its manifest facts read from its header.

        Serving from this very handle means the bytes checked are the bytes sent, even if
        the round is republished meanwhile. Raises FileNotFoundError, or CorruptModel when
        the header is unreadable.
        """
        file = self.path(round_index).open("rb")
        try:
            return PublishedRound(file, round_index, self.verified)
        except BaseException:
            file.close()
            raise

    def load(self, round_index: int) -> torch.Tensor:
        """The published vector of ``round_index`` (safetensors: no code is run on load)."""
        from safetensors.torch import load_file

        tensors = load_file(self.path(round_index))
        if set(tensors) != {TENSOR_NAME}:
            raise ValueError(f"round {round_index} holds {sorted(tensors)}, not [{TENSOR_NAME!r}]")
        return tensors[TENSOR_NAME]

    def _prune(self) -> None:
        for old in self.rounds()[: -self.keep_rounds]:
            path = self.path(old)
            path.unlink(missing_ok=True)
            log.debug("pruned round %s of client %s", old, self.owner)


class PublishedModels:
    """One owner's published models of every run, each run in ``root/<run id>/``."""

    def __init__(self, root: Path, owner: int, keep_rounds: int = 3) -> None:
        self.root = root
        self.owner = owner
        self.keep_rounds = keep_rounds
        self.verified = VerifiedFiles()
        """Files the serving side checked already (its stores share this one record)."""

    def for_publishing(self, run: str) -> DiskModelStore:
        """The run's store, created if needed (the ClientApp's side)."""
        return DiskModelStore(self._folder(run), self.owner, self.keep_rounds)

    def for_serving(self, run: str) -> DiskModelStore | None:
        """The run's store as the peer server reads it; None when it published nothing."""
        try:
            folder = self._folder(run)
        except ValueError:
            return None
        if not folder.is_dir():
            return None
        return DiskModelStore(
            folder, self.owner, self.keep_rounds, read_only=True, verified=self.verified
        )

    def retire_other_runs(self, run: str) -> None:
        """Delete every run's models but ``run``'s: a node takes part in one run at a time.

        ``run``'s folder is made ready, so that from now on a peer's fetch of a round not
        published yet waits for it instead of failing as for a run this node is not in.
        """
        keep = self._folder(run)
        keep.mkdir(parents=True, exist_ok=True)
        for folder in self.root.iterdir():
            if folder != keep and folder.is_dir() and RUN_FOLDER.fullmatch(folder.name):
                shutil.rmtree(folder, ignore_errors=True)
                log.info("removed the published models of run %s", folder.name)

    def begin_launch(self, run: str, launch: str) -> None:
        """Record that this owner joined ``run`` in ``launch`` (its Flower run).

        A run relaunched after a coordinator restart starts over from its last completed
        round, so a fetch still waiting for a round of the launch before will never be
        served from that launch: the peer server ends the wait of a fetch that names
        another launch than the one recorded here.
        """
        write_text(self._folder(run) / _LAUNCH_FILE, launch)

    def _folder(self, run: str) -> Path:
        if not RUN_FOLDER.fullmatch(run):
            raise ValueError(f"run id {run!r} cannot name a folder")
        return self.root / run


class PublishedRound:
    """One published round's file, open for serving: its manifest facts, then its bytes.

    ``chunks`` reads the file once and, unless ``verified`` lists this very file, hashes the
    weights on the way, on a worker thread while earlier chunks are sent; when they no
    longer match the digest recorded at publish it raises CorruptModel instead of yielding
    the last chunk, so a damaged file never leaves complete and the check costs no pass of
    its own. A file that passed is added to ``verified``.
    """

    def __init__(
        self, file: BinaryIO, round_index: int, verified: VerifiedFiles | None = None
    ) -> None:
        self._file = file
        self._verified = verified
        stat = os.fstat(file.fileno())
        self.identity: FileIdentity = (
            os.fsdecode(file.name),
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ctime_ns,
        )
        length_bytes = file.read(_LENGTH_BYTES)
        complete = len(length_bytes) == _LENGTH_BYTES
        header_len = int.from_bytes(length_bytes, "little") if complete else -1
        if not 0 < header_len <= _MAX_HEADER_BYTES:
            raise self._corrupt(round_index, "no readable safetensors header")
        raw_header = file.read(header_len)
        try:
            header = json.loads(raw_header)
            metadata = header.pop("__metadata__", {})
            tensors = tuple(
                TensorInfo(name, tuple(entry["shape"]), entry["dtype"])
                for name, entry in header.items()
            )
            recorded = metadata[WEIGHTS_DIGEST]
            if not isinstance(recorded, str):
                raise TypeError(f"{WEIGHTS_DIGEST} is {recorded!r}")
            samples = metadata.get("num_samples")
            num_samples = int(samples) if samples is not None else None
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            reason = f"header is damaged or has no recorded digest ({error!r})"
            raise self._corrupt(round_index, reason) from None
        self._head = length_bytes + raw_header
        self.stored = StoredModel(
            round=round_index,
            byte_size=stat.st_size,
            weights_digest=recorded,
            tensors=tensors,
            num_samples=num_samples,
        )

    @property
    def checked_before(self) -> bool:
        """Whether this file already passed its digest check when it was served in full."""
        return self._verified is not None and self.identity in self._verified

    def chunks(self, size: int) -> Iterator[bytes]:
        """The whole file, in order, in pieces of ``size`` bytes (the first holds the header)."""
        weights_read = self._weights(size)
        if self.checked_before:
            yield self._head + next(weights_read)
            yield from weights_read
            return
        with BackgroundDigest() as weights:
            first = next(weights_read)
            weights.update(first)
            pending = self._head + first
            for following in weights_read:
                weights.update(following)  # hashed while ``pending`` is sent
                yield pending
                pending = following
            if weights.hexdigest() != self.stored.weights_digest:
                reason = (
                    f"{DIGEST_NAME} of the stored weights differs from the one recorded at publish"
                )
                raise self._corrupt(self.stored.round, reason)
        if self._verified is not None:
            self._verified.add(self.identity)
        yield pending

    def _weights(self, size: int) -> Iterator[bytes]:
        """The bytes after the header, read so that with the header in front of the first
        piece every chunk holds ``size`` bytes (the first piece may be empty)."""
        yield self._file.read(max(size - len(self._head), 0))
        while piece := self._file.read(size):
            yield piece

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> PublishedRound:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @staticmethod
    def _corrupt(round_index: int, reason: str) -> CorruptModel:
        return CorruptModel(f"round {round_index}: {reason}")
