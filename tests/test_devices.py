"""A node's tensors on one device (issue 31), checked on a CPU-only machine.

On a GPU client the peer models read from the network arrived on the CPU while the client's
own model was on the GPU, and DPFL's collaboration failed inside torch on every client. torch
offers the ``meta`` device on any machine: a node whose model lives there, fed peers that
arrive on the CPU, is the same situation without a GPU.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch
from test_daemons import _client_args, _data_file

from collabfl.apps.run_setup import RunSettings
from collabfl.apps.session import NodeState, open_node
from collabfl.client import daemon
from collabfl.client.data import ArrayDataset, ClientData
from collabfl.client.data.client_file import save_client_file
from collabfl.client.node import ClientNode, ClientSplits
from collabfl.client.peers import MemoryModelStore, PeerFetcher
from collabfl.client.settings import ParticipantSettings, parser
from collabfl.engine.config import ConfigError, validate_config
from collabfl.engine.experiment import resolve_device as config_device
from collabfl.kernel import devices
from collabfl.kernel.devices import check_spec, device_report, resolve_device
from collabfl.kernel.flat import FlatModel
from collabfl.kernel.models import build_model
from collabfl.kernel.samples import TensorData
from collabfl.kernel.training import TrainingConfig
from collabfl.strategies.greedy import bggc
from collabfl.strategies.protocol import Instruction
from collabfl.strategies.streaming import add_models, streaming_average
from collabfl.strategies.verbs import Collaborate, Evaluate

META = torch.device("meta")
NO_CUDA = not torch.cuda.is_available()


def _held(models: dict[int, torch.Tensor]):
    class Hold:
        def __enter__(self):
            return models

        def __exit__(self, *exc):
            return False

    return lambda ids: Hold()


def test_the_averaging_math_refuses_models_on_two_devices_naming_both():
    own = torch.zeros(4)
    peers = {1: torch.zeros(4, device=META)}
    with pytest.raises(ValueError, match=r"peer 1.*cpu and meta"):
        add_models(own, 1.0, peers, {1: 1.0})
    with pytest.raises(ValueError, match=r"cpu and meta"):
        streaming_average(own, 1.0, [1], {1: 1.0}, _held(peers), None)


def test_the_greedy_search_refuses_models_on_two_devices_naming_both():
    own = torch.zeros(4, device=META)
    peers = {1: torch.zeros(4), 2: torch.zeros(4)}
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"meta and cpu"):
        bggc(own, 1.0, [1, 2], {1: 1.0, 2: 1.0}, _held(peers), lambda v: 0.0, None, 1, rng)


def _meta_node(store: MemoryModelStore) -> ClientNode:
    """Client 0 whose model and data live on ``meta``; its peers publish on the CPU."""
    workspace = FlatModel(build_model("mnist1d_cnn", 10, seed=0), META)
    x = torch.zeros(8, 40, device=META)
    y = torch.zeros(8, dtype=torch.long, device=META)
    data = TensorData(x, y)
    return ClientNode(
        0,
        ClientSplits(data, data, data),
        workspace,
        workspace.get(),
        TrainingConfig(),
        0,
        store,
        PeerFetcher(store, workspace.numel),
    )


def test_a_node_averages_peers_that_arrive_on_another_device_on_its_own():
    store = MemoryModelStore()
    node = _meta_node(store)
    for peer in (1, 2):
        store.publish(peer, 0, torch.full((node.workspace.numel,), float(peer)))
    task = Collaborate("none", (1, 2), (1.0, 1.0))
    reply = node.handle(Instruction(0, task))
    assert reply.metrics.chosen == (1, 2)
    assert node.slots["model"].device == META


def _client_file(path):
    rng = np.random.default_rng(0)

    def split(n):
        return ArrayDataset(rng.normal(size=(n, 1, 40)).astype(np.float32), rng.integers(0, 10, n))

    save_client_file(
        ClientData(0, split(16), split(8), split(8), False),
        path,
        num_classes=10,
        dataset="synthetic",
    )
    return path


def _settings(device: str) -> RunSettings:
    return RunSettings("r1", 0, "mnist1d_cnn", device, 1, TrainingConfig(batch_size=8))


def test_a_restored_node_has_its_best_models_on_its_device(tmp_path):
    """A best-validation model saved to disk (always from the CPU) comes back on the node's
    device, as its slots do: DPFL's ``from_best`` training starts from it."""
    data = _client_file(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(_settings("cpu"))
    store = MemoryModelStore()
    node = open_node(0, data, state, store, store)
    node.handle(Instruction(0, Evaluate(keep_best=True)))
    state.save(node)
    on_meta = _meta_node(store)
    state.restore(on_meta)
    assert on_meta.slots["model"].device == META
    best = on_meta.best["model"].vector
    assert best is not None and best.device == META


def test_a_run_on_device_auto_opens_its_node(tmp_path):
    data = _client_file(tmp_path / "c.npz")
    state = NodeState(tmp_path / "state")
    state.write_settings(_settings("auto"))
    store = MemoryModelStore()
    node = open_node(0, data, state, store, store)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert node.device.type == expected


@pytest.mark.parametrize("spec", ["cpu", "cuda", "cuda:0", "cuda:12", "auto"])
def test_the_config_accepts_every_device_spec(spec):
    assert validate_config({"device": spec}).device == spec


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:0,1", ""])
def test_the_config_refuses_anything_else_naming_the_forms(spec):
    with pytest.raises(ConfigError, match=r"device: not a device; give cpu, cuda, cuda:N or auto"):
        validate_config({"device": spec})
    with pytest.raises(ValueError, match="cpu, cuda, cuda:N or auto"):
        check_spec(spec)


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal where torch sees no CUDA device")
@pytest.mark.parametrize("spec", ["cuda", "cuda:1"])
def test_cuda_where_torch_sees_none_is_one_line_naming_the_value(spec):
    with pytest.raises(ValueError) as refused:
        resolve_device(spec)
    message = str(refused.value)
    assert "\n" not in message
    assert f"device {spec!r}" in message and "torch sees no CUDA device" in message
    assert torch.__version__ in message
    with pytest.raises(ConfigError, match="torch sees no CUDA device"):
        config_device(spec)
    ok, line = device_report(spec)
    assert not ok and line == message


def test_a_cuda_index_beyond_the_devices_names_those_that_exist(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(
        ValueError, match=r"'cuda:2': torch sees 2 CUDA device\(s\), cuda:0 to cuda:1"
    ):
        resolve_device("cuda:2")


def test_the_cpu_and_auto_always_resolve_and_report():
    assert resolve_device("cpu") == torch.device("cpu")
    ok, line = device_report("cpu")
    assert ok and line.startswith("cpu: cpu (") and torch.__version__ in line
    ok, line = device_report("auto")
    assert ok and line.startswith("cuda:" if torch.cuda.is_available() else "auto: cpu")


def test_place_moves_only_what_is_elsewhere():
    here = torch.zeros(3)
    assert devices.place(here, torch.device("cpu")) is here
    assert devices.place(here, META).device == META


@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal where torch sees no CUDA device")
def test_the_client_daemon_refuses_cuda_where_there_is_none(tmp_path, reserve_ports):
    client_args = _client_args(tmp_path, _data_file(tmp_path), reserve_ports(3))
    argv = [*client_args[3:], "--device", "cuda"]
    settings = ParticipantSettings.from_flags(parser().parse_args(argv))
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        daemon.check_settings(settings)
    command = [*client_args, "--device", "cuda"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "device 'cuda': torch sees no CUDA device" in lines[0]
    assert not (tmp_path / "state" / "supernode.log").exists()
