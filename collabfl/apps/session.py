"""A ClientNode that outlives Flower's one-process-per-message ClientApp.

Flower starts a fresh ClientApp process for every message, so whatever a client must
remember between messages (its model slots, best-validation trackers, fetch counters, the
run's settings) is written to the node's state directory after each message and read back
before the next. Writes are atomic: a client killed mid-write restarts from the last state.

A long-lived executor (flower/warm_executor.py) serves many messages in one process; there
``NodeCache`` keeps the opened node in memory, but only while the state directory and the
data file are exactly as the node last left them, so the disk stays the single truth.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from collabfl.apps.run_setup import Description, RunSettings
from collabfl.client.data.opening import DataRef, describe_data, open_data
from collabfl.client.data.source import check_model
from collabfl.client.model_store import PUBLISHED_DIR
from collabfl.client.node import BestModel, ClientNode
from collabfl.client.peers import FetchStats, ModelPublisher, PeerFetcher, PeerModelSource
from collabfl.kernel.atomic import replacing, write_bytes
from collabfl.kernel.devices import place, resolve_device
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.objective import objective_from_names


class NodeState:
    """The files in a node's state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.published = self.dir / PUBLISHED_DIR

    def write_settings(self, settings: RunSettings) -> None:
        """Start (or rejoin) a run; a different run id starts from a clean state."""
        current = self.dir / "run.json"
        if (
            current.exists()
            and RunSettings.from_json(current.read_text()).run_id != settings.run_id
        ):
            for name in ("slots.safetensors", "best.safetensors", "node.json", "progress.json"):
                (self.dir / name).unlink(missing_ok=True)
        write_bytes(current, settings.to_json().encode())

    def read_settings(self) -> RunSettings:
        path = self.dir / "run.json"
        if not path.exists():
            raise RuntimeError(f"no run set up in {self.dir}: the coordinator sends 'setup' first")
        return RunSettings.from_json(path.read_text())

    def restore(self, node: ClientNode) -> None:
        """Load slots, best trackers and fetch counters saved by the previous message."""
        slots_file, best_file, node_file = self._files()
        device = node.device
        if slots_file.exists():
            node.slots = {k: place(v, device) for k, v in load_file(slots_file).items()}
        best_file_vectors = load_file(best_file) if best_file.exists() else {}
        best_vectors = {k: place(v, device) for k, v in best_file_vectors.items()}
        if node_file.exists():
            saved = json.loads(node_file.read_text())
            for slot, values in saved["best"].items():
                node.best[slot] = BestModel(**values, vector=best_vectors.get(slot))
            node.fetcher.stats = FetchStats(**saved["fetch"])

    def save(self, node: ClientNode) -> None:
        slots_file, best_file, node_file = self._files()
        _save_tensors(slots_file, {k: v.cpu() for k, v in node.slots.items()})
        best_vectors = {k: b.vector.cpu() for k, b in node.best.items() if b.vector is not None}
        _save_tensors(best_file, best_vectors)
        best = {
            slot: {f.name: getattr(b, f.name) for f in dataclasses.fields(b) if f.name != "vector"}
            for slot, b in node.best.items()
        }
        saved = {"best": best, "fetch": dataclasses.asdict(node.fetcher.stats)}
        write_bytes(node_file, json.dumps(saved).encode())

    @property
    def node_files(self) -> tuple[Path, ...]:
        """The files a node is rebuilt from: the run's settings and the saved state."""
        return (self.dir / "run.json", *self._files())

    def _files(self) -> tuple[Path, Path, Path]:
        return self.dir / "slots.safetensors", self.dir / "best.safetensors", self.dir / "node.json"

    def begin(self, round_index: int, step: str) -> None:
        """Make a resumed coordinator's replay of a round exact.

        The first message of a new round snapshots the node's state; a step of the current
        round that arrives a second time means the coordinator restarted and replays the
        round, so the state goes back to that snapshot first.
        """
        progress = self._progress()
        snapshot = self.dir / "round_start"
        if round_index > progress["round"]:
            snapshot.mkdir(exist_ok=True)
            for path in self._files():
                _copy_or_remove(path, snapshot / path.name)
            progress = {"round": round_index, "done": []}
        elif round_index == progress["round"] and step in progress["done"]:
            for path in self._files():
                _copy_or_remove(snapshot / path.name, path)
            progress["done"] = []
        self._write_progress(progress)

    def done(self, round_index: int, *steps: str) -> None:
        """Record that ``steps`` of the round finished and their state was saved (one write
        for all the steps of a program)."""
        progress = self._progress()
        new = [step for step in steps if step not in progress["done"]]
        if progress["round"] == round_index and new:
            progress["done"].extend(new)
            self._write_progress(progress)

    def _progress(self) -> dict[str, Any]:
        path = self.dir / "progress.json"
        return json.loads(path.read_text()) if path.exists() else {"round": -1, "done": []}

    def _write_progress(self, progress: dict[str, Any]) -> None:
        write_bytes(self.dir / "progress.json", json.dumps(progress).encode())


def open_node(
    client_id: int,
    data: DataRef,
    state: NodeState,
    publisher: ModelPublisher,
    source: PeerModelSource,
    allowed: Collection[str] = (),
) -> ClientNode:
    """Rebuild this client's node from its data (a file or a ``data.source`` factory) and
    saved state; the run's user code (import paths) is loaded only if its operator
    ``allowed`` it."""
    settings = state.read_settings()
    training = settings.training
    objective = objective_from_names(training.loss, training.optimizer, allowed)
    if settings.threads:
        torch.set_num_threads(settings.threads)
    device = resolve_device(settings.device)
    splits, num_classes = open_data(
        data,
        client_id,
        device,
        settings.val_fraction,
        settings.seed,
        allowed,
        settings.data_workers,
    )
    module = build_model(settings.model, num_classes, settings.seed, allowed)
    if isinstance(data, str):  # a factory's classes: the model must give as many outputs
        check_model(
            data, module, splits.train.inputs(slice(0, 2)).cpu(), num_classes, settings.model
        )
    workspace = FlatModel(module, device)
    node = ClientNode(
        client_id=client_id,
        data=splits,
        workspace=workspace,
        initial_model=workspace.get(),
        training=settings.training,
        seed=settings.seed,
        publisher=publisher,
        fetcher=PeerFetcher(source, workspace.numel),
        objective=objective,
    )
    state.restore(node)
    return node


FileStamp = tuple[int, int, int] | None
"""Inode, size and modification time of a file, or None when it does not exist."""


@dataclass(frozen=True)
class NodeKey:
    """What a cached node was built from; any difference means it must be reopened.

    Atomic writes replace files (a new inode), so the stamps of the state files change on
    any write by someone else: a new run's set-up, a replayed round's rewind, a daemon of
    the other runtime, an operator replacing the data file.
    """

    client_id: int
    data_ref: DataRef
    data: FileStamp
    state_dir: Path
    state_files: tuple[FileStamp, ...]

    @classmethod
    def of(cls, client_id: int, data: DataRef, state: NodeState) -> NodeKey:
        """A ``data.source`` factory has no stamp: what its loader reads is its own."""
        return cls(
            client_id=client_id,
            data_ref=data.resolve() if isinstance(data, Path) else data,
            data=_stamp(data) if isinstance(data, Path) else None,
            state_dir=state.dir.resolve(),
            state_files=tuple(_stamp(path) for path in state.node_files),
        )


class NodeCache:
    """The node a process opened last, kept between messages while it still matches disk.

    ``open`` hands the node out and forgets it; only ``keep``, called after its state was
    saved, puts it back. A message that fails half way therefore never leaves a
    half-updated node behind: the next one reopens from the last saved state.
    """

    def __init__(self) -> None:
        self._cached: tuple[NodeKey, ClientNode] | None = None

    def open(
        self,
        client_id: int,
        data: DataRef,
        state: NodeState,
        publisher: ModelPublisher,
        source: PeerModelSource,
        allowed: Collection[str] = (),
    ) -> ClientNode:
        """The cached node when nothing changed on disk since ``keep``, else ``open_node``."""
        cached, self._cached = self._cached, None
        if cached is None or cached[0] != NodeKey.of(client_id, data, state):
            return open_node(client_id, data, state, publisher, source, allowed)
        node = cached[1]
        node.publisher, node.fetcher.source = publisher, source
        return node

    def keep(self, node: ClientNode, data: DataRef, state: NodeState) -> None:
        """Remember ``node``, whose state was just saved to ``state``."""
        self._cached = NodeKey.of(node.client_id, data, state), node


def _stamp(path: Path) -> FileStamp:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _copy_or_remove(source: Path, target: Path) -> None:
    """Make ``target`` a copy of ``source``, or absent when ``source`` is."""
    if source.exists():
        with replacing(target) as tmp:
            shutil.copyfile(source, tmp)
    else:
        target.unlink(missing_ok=True)


def _save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    with replacing(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))


def describe(
    client_id: int,
    data: DataRef,
    peer_address: str,
    market: Mapping[str, float] | None = None,
    val_fraction: float = 0.2,
    allowed: Collection[str] = (),
) -> Description:
    """This client's set-up answer, from its data (``market``: its iPFL profile;
    ``val_fraction``, ``allowed``: the run's hold-out and the operator's allow-list, for a
    ``data.source`` factory)."""
    facts = describe_data(data, client_id, val_fraction, allowed)
    market = market or {}
    return Description(
        client_id=client_id,
        num_samples=facts.num_samples,
        num_classes=facts.num_classes,
        peer_address=peer_address,
        cost=market.get("cost"),
        eagerness=market.get("eagerness"),
        dataset=facts.dataset,
        partition=facts.partition,
    )
