"""A client's state across Flower's one-process-per-message ClientApp."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch

from collabfl.apps.run_setup import RunSettings
from collabfl.apps.session import NodeCache, NodeState, open_node
from collabfl.client.data import ArrayDataset, ClientData
from collabfl.client.data.client_file import load_client_file, save_client_file
from collabfl.client.peers import MemoryModelStore
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.verbs import Evaluate, Train


def _data(path, seed: int = 0):
    rng = np.random.default_rng(seed)

    def split(n):
        return ArrayDataset(rng.normal(size=(n, 1, 40)).astype(np.float32), rng.integers(0, 10, n))

    client = ClientData(3, split(40), split(10), split(10), malicious=False)
    save_client_file(client, path, num_classes=10, dataset="synthetic")
    return path


def _settings(run_id: str = "r1") -> RunSettings:
    return RunSettings(run_id, 0, "mnist1d_cnn", "cpu", 1, TrainingConfig(batch_size=8))


def _node(tmp_path, state: NodeState):
    store = MemoryModelStore()
    return open_node(3, tmp_path / "c.npz", state, store, store)


def _train(node, round_index: int):
    return node.handle(Instruction(round_index, Train(epochs=1)))


def test_client_file_round_trip_and_errors(tmp_path):
    path = _data(tmp_path / "c.npz")
    client, meta = load_client_file(path)
    assert (len(client.train), meta["num_classes"], meta["input_shape"]) == (40, 10, [1, 40])
    (tmp_path / "bad.npz").write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not a collabfl client data file"):
        load_client_file(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError):
        load_client_file(tmp_path / "missing.npz")


def test_state_survives_a_new_process(tmp_path):
    _data(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    with pytest.raises(RuntimeError, match="setup"):
        _node(tmp_path, state)
    state.write_settings(_settings())
    node = _node(tmp_path, state)
    _train(node, 0)
    node.handle(Instruction(0, Evaluate()))
    state.save(node)
    again = _node(tmp_path, NodeState(tmp_path / "state"))
    assert torch.equal(again.slots["model"], node.slots["model"])
    assert again.best["model"].val_acc == node.best["model"].val_acc


def test_replayed_round_starts_from_the_round_snapshot(tmp_path):
    _data(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(_settings())
    for round_index in (0, 1):
        state.begin(round_index, "train:model")
        node = _node(tmp_path, state)
        _train(node, round_index)
        state.save(node)
        state.done(round_index, "train:model")
    after_round_one = _node(tmp_path, state).slots["model"].clone()
    # The coordinator restarted and replays round 1 from its first step.
    state.begin(1, "train:model")
    node = _node(tmp_path, state)
    _train(node, 1)
    assert torch.equal(node.slots["model"], after_round_one)


def test_a_new_run_starts_clean(tmp_path):
    _data(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(_settings("r1"))
    node = _node(tmp_path, state)
    _train(node, 0)
    state.save(node)
    state.write_settings(_settings("r2"))
    assert _node(tmp_path, state).slots == {}


def _cached_step(cache: NodeCache, tmp_path, state: NodeState, round_index: int):
    """One message as the ClientApp runs it: open (maybe cached), work, save, keep."""
    store = MemoryModelStore()
    node = cache.open(3, tmp_path / "c.npz", state, store, store)
    _train(node, round_index)
    state.save(node)
    cache.keep(node, tmp_path / "c.npz", state)
    return node


def test_node_cache_reuses_the_node_only_while_its_files_are_unchanged(tmp_path):
    _data(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(_settings())
    cache = NodeCache()
    first = _cached_step(cache, tmp_path, state, 0)
    assert _cached_step(cache, tmp_path, state, 1) is first  # warm: same node, same model
    # The warm node equals one reopened from disk: saving after every message still holds.
    assert torch.equal(_node(tmp_path, state).slots["model"], first.slots["model"])

    state.write_settings(_settings("r2"))  # a new run
    second = _cached_step(cache, tmp_path, state, 0)
    assert second is not first
    _data(tmp_path / "c.npz", seed=1)  # the participant replaced its data file
    third = _cached_step(cache, tmp_path, state, 1)
    assert third is not second
    other = NodeState(tmp_path / "other")  # another node's state directory
    other.write_settings(_settings("r2"))
    assert _cached_step(cache, tmp_path, other, 0) is not third


def test_node_cache_reopens_after_a_rewind_or_a_failed_message(tmp_path):
    _data(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(_settings())
    cache = NodeCache()
    state.begin(0, "train:model")
    first = _cached_step(cache, tmp_path, state, 0)
    state.done(0, "train:model")
    state.begin(0, "train:model")  # a replayed step rewinds the files to the round start
    rewound = cache.open(3, tmp_path / "c.npz", state, MemoryModelStore(), MemoryModelStore())
    assert rewound is not first and "model" not in rewound.slots
    # Not kept after a message that did not save: the next message reopens from disk.
    assert cache.open(3, tmp_path / "c.npz", state, *[MemoryModelStore()] * 2) is not rewound


def test_a_participants_model_state_is_readable_by_its_owner_only(tmp_path):
    _data(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(_settings())
    node = _node(tmp_path, state)
    _train(node, 0)
    node.handle(Instruction(0, Evaluate(keep_best=True)))
    previous = os.umask(0o022)
    try:
        state.save(node)
    finally:
        os.umask(previous)
    saved = [p for p in state.dir.iterdir() if p.suffix in (".safetensors", ".json")]
    models = [p for p in saved if p.suffix == ".safetensors"]
    assert models, saved
    for path in saved:
        if path.name != "run.json":  # the run's settings hold nothing private
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
