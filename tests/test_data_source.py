"""``data.source = "pkg.mod:factory"``: each client's data from the lab's own loader.

A factory's data is checked on a sample before a run and refused in one line naming the
client, the split and the field (exit 2 from the command line, ConfigError in Python); the
participant daemon refuses one its operator did not allow, or one that is wrong, before it
starts anything; doctor checks one as the daemon does; and a streamed Dataset is read a
batch at a time, never held whole. (tests/test_federation_user_code.py runs one over a
real federation.)
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.client import daemon
from collabfl.engine.config import ConfigError, validate_config
from collabfl.engine.sourced import sourced_data
from collabfl.kernel import exit_status
from collabfl.kernel.daemon_settings import FILE_NAME
from tests.support.sources import Blobs

SOURCES = "tests.support.sources"
LINEAR = "model.name=tests.support.user_code:make_net"


def _config(source: str, *extra: str) -> dict[str, Any]:
    raw: dict[str, Any] = {"data": {"source": f"{SOURCES}:{source}", "num_clients": 3}}
    for item in extra:
        key, value = item.split("=", 1)
        section, name = key.split(".")
        raw.setdefault(section, {})[name] = value
    return raw


def _refusal(source: str, *extra: str) -> str:
    config = validate_config(_config(source, *extra))
    with pytest.raises(ConfigError) as refused:
        sourced_data(config, [config])
    return str(refused.value)


@pytest.mark.parametrize(
    ("source", "extra", "line"),
    [
        (
            "wrong_labels",
            (),
            "data.source tests.support.sources:wrong_labels: client 1, split test, label: "
            "10 is outside 0..9 (num_classes 10)",
        ),
        (
            "mismatched_shape",
            (),
            "data.source tests.support.sources:mismatched_shape: client 1, split val, input: "
            "shape (1, 41), but client 0's train has (1, 40)",
        ),
        (
            "missing_test",
            (),
            "data.source tests.support.sources:missing_test: client 0, keys: missing test "
            "(wanted: train, val, test, num_classes; val optional)",
        ),
        (
            "three_classes",
            (LINEAR,),
            "data.source tests.support.sources:three_classes: client 0, split train, "
            "num_classes: model tests.support.user_code:make_net gives outputs of shape (10,), "
            "not (3,)",
        ),
    ],
)
def test_a_wrong_factory_is_refused_in_one_line_naming_client_split_and_field(source, extra, line):
    assert _refusal(source, *extra) == line


def test_a_model_that_refuses_the_inputs_is_named_with_their_shape():
    refused = _refusal("blobs", "model.name=cifar_cnn")
    assert refused.startswith(
        "data.source tests.support.sources:blobs: client 0, split train, input: "
        "model cifar_cnn refuses inputs of shape (1, 40): "
    )
    assert "\n" not in refused


def test_simulate_refuses_a_wrong_factory_with_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    flags = ["--set", f"data.source={SOURCES}:wrong_labels", "--set", "data.num_clients=2"]
    result = CliRunner().invoke(app, ["simulate", *flags, "--out", str(out)])
    assert result.exit_code == exit_status.USAGE, result.output
    assert "client 1, split test, label: 10 is outside 0..9" in result.output
    assert not (out / "partition.npz").exists() and not list(out.glob("*/metrics.jsonl"))


def test_federation_prepare_has_no_files_to_write_for_a_factory(tmp_path):
    flags = ["--set", f"data.source={SOURCES}:blobs"]
    result = CliRunner().invoke(app, ["federation", "prepare", *flags, "--out", str(tmp_path)])
    assert result.exit_code == exit_status.USAGE
    assert "there are no files to prepare" in result.output and not list(tmp_path.iterdir())


def test_a_factory_sample_checks_the_factory_not_the_whole_set():
    """The check reads a few items of each split, whatever the split's length."""
    config = validate_config(_config("blobs"))
    data = sourced_data(config, [config])
    assert (data.num_classes, data.num_clients) == (10, 3)


# --- the participant daemon ----------------------------------------------------------------


def _daemon(tmp_path: Path, source: str, *extra: str) -> int:
    return daemon.main([
        "--client-id", "1", "--data", f"{SOURCES}:{source}", "--state-dir", str(tmp_path),
        "--superlink", "127.0.0.1:9", "--peer-address", "127.0.0.1:9",
        "--coordinator-key", str(tmp_path / "absent.pem"), "--insecure", *extra,
    ])  # fmt: skip


def test_the_daemon_refuses_a_factory_its_operator_did_not_allow(tmp_path, capsys):
    assert _daemon(tmp_path, "blobs") == exit_status.USAGE
    said = capsys.readouterr().err.strip()
    assert said == (
        f"collabfl-client: import path '{SOURCES}:blobs' is not allowed on this participant "
        "(allowed: none); its operator allows one with collabfl-client --allow-import"
    )


def test_the_daemon_refuses_a_wrong_factory_before_starting_anything(tmp_path, capsys):
    path = f"{SOURCES}:wrong_labels"
    assert _daemon(tmp_path, "wrong_labels", "--allow-import", path) == exit_status.USAGE
    said = capsys.readouterr().err.strip()
    assert said == (
        f"collabfl-client: data.source {path}: client 1, split test, label: 10 is outside "
        "0..9 (num_classes 10)"
    )
    assert not (tmp_path / FILE_NAME).exists()


# --- doctor --------------------------------------------------------------------------------


def test_doctor_checks_a_factory_as_the_daemon_does():
    good = CliRunner().invoke(app, ["doctor", "--data", f"{SOURCES}:blobs", "--client-id", "2"])
    assert good.exit_code == 0, good.output
    assert good.output.strip() == (
        f"✓ data.source {SOURCES}:blobs: client 2, a sample of every split valid, inputs 1×40, "
        "10 classes"
    )
    bad = CliRunner().invoke(
        app, ["doctor", "--data", f"{SOURCES}:wrong_labels", "--client-id", "1"]
    )
    assert bad.exit_code == 1
    (line,) = bad.output.strip().splitlines()
    assert line.startswith(
        f"✗ data.source {SOURCES}:wrong_labels: client 1, split test, label: 10 is outside 0..9"
    )
    assert "— fix: make the factory return {train, val (optional), test, num_classes}" in line


def test_doctor_uses_a_client_state_dirs_factory_and_allow_list(tmp_path):
    from collabfl.client.settings import ParticipantSettings, parser
    from collabfl.kernel.daemon_settings import save

    state = tmp_path / "state"
    args = parser().parse_args([
        "--client-id", "1", "--data", f"{SOURCES}:wrong_labels", "--state-dir", str(state),
        "--superlink", "127.0.0.1:9", "--peer-address", "127.0.0.1:9",
        "--coordinator-key", str(tmp_path / "absent.pem"),
    ])  # fmt: skip
    save(ParticipantSettings.from_flags(args))
    result = CliRunner().invoke(app, ["doctor", "--state-dir", str(state)])
    assert result.exit_code == 1
    assert f"✗ import path '{SOURCES}:wrong_labels' is not allowed on this participant" in (
        result.output
    )


# --- streamed, never held whole ------------------------------------------------------------


class Counted(Blobs):
    """Blobs that count how many of their inputs are alive at once, and refuse to be
    turned into one array."""

    alive = 0
    peak = 0
    reads = 0

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, label = super().__getitem__(i)
        cls = type(self)
        cls.reads += 1
        cls.alive += 1
        cls.peak = max(cls.peak, cls.alive)
        weakref.finalize(x, _gone)
        return x, label

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise AssertionError("a streamed Dataset was turned into an array")


def _gone() -> None:
    Counted.alive -= 1


TRAIN_ITEMS = 500


def counted(client_id: int) -> dict[str, Any]:
    """A large streamed train and test set, and a small val split of arrays."""
    val = Blobs(40, seed=100 + client_id)
    x = np.stack([val[i][0].numpy() for i in range(len(val))])
    y = np.array([val[i][1] for i in range(len(val))])
    return {
        "train": Counted(TRAIN_ITEMS, seed=client_id),
        "test": Counted(TRAIN_ITEMS, seed=50 + client_id),
        "val": (x, y),
        "num_classes": 10,
    }


def test_a_streamed_dataset_is_read_a_batch_at_a_time_never_whole(tmp_path):
    Counted.alive = Counted.peak = Counted.reads = 0
    batch, eval_batch = 16, 64
    overrides = {
        "data.source": f"{__name__}:counted",
        "data.num_clients": 2,
        "rounds": 1,
        "epochs": 1,
        "method": "fedavg",
        "model.name": "tests.support.user_code:make_net",
        "training.batch_size": batch,
        "training.eval_batch_size": eval_batch,
    }
    flags = [arg for k, v in overrides.items() for arg in ("--set", f"{k}={json.dumps(v)}")]
    result = CliRunner().invoke(app, ["simulate", *flags, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    # every item was read (labels up front, an epoch of training, evaluations) ...
    assert Counted.reads > 4 * TRAIN_ITEMS
    # ... but never more than one evaluation batch of inputs at once
    assert Counted.peak <= eval_batch, Counted.peak


class Labelled(Counted):
    """A million items whose labels are known without reading any (``targets``, as
    torchvision's ImageFolder has them): nothing is read up front."""

    def __init__(self, size: int) -> None:
        super().__init__(size, seed=7)
        self.targets = np.arange(size) % 10

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, _ = super().__getitem__(i)
        return x, int(self.targets[i])


HUGE = 1_000_000


def labelled(client_id: int) -> dict[str, Any]:
    data = counted(client_id)
    return {**data, "train": Labelled(HUGE)}


def test_a_dataset_with_targets_of_a_million_items_is_read_only_as_batches_need(tmp_path):
    Counted.alive = Counted.peak = Counted.reads = 0
    overrides = {
        "data.source": f"{__name__}:labelled",
        "data.num_clients": 2,
        "rounds": 1,
        "epochs": 0.0005,  # 16 steps of 32 of a million samples
        "method": "fedavg",
        "model.name": "tests.support.user_code:make_net",
        "training.eval_batch_size": 64,
    }
    flags = [arg for k, v in overrides.items() for arg in ("--set", f"{k}={json.dumps(v)}")]
    result = CliRunner().invoke(app, ["simulate", *flags, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    trained = 2 * 16 * 32  # two clients' steps; the rest are the small test sets' reads
    assert Counted.reads < trained + 4 * 2 * (TRAIN_ITEMS + 10), Counted.reads
    assert Counted.peak <= 64, Counted.peak


def test_dataloader_workers_read_the_same_items_in_the_same_order():
    from collabfl.client.data.source import load_client

    cpu = torch.device("cpu")
    alone, _ = load_client(f"{SOURCES}:blobs", 1, cpu, 0.2, seed=3)
    workers, _ = load_client(f"{SOURCES}:blobs", 1, cpu, 0.2, seed=3, workers=2)
    for split in ("train", "val", "test"):
        a, b = getattr(alone, split), getattr(workers, split)
        assert torch.equal(a.y, b.y)
        assert torch.equal(a.inputs(torch.arange(len(a))), b.inputs(torch.arange(len(b))))


# --- the documented example ----------------------------------------------------------------


def test_the_png_folder_example_runs_through_its_factory(tmp_path, monkeypatch):
    """examples/write_png_folder.py writes PNGs; examples/png_folder.toml reads them through
    examples/png_folder_data.py's factory."""
    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "examples"))
    import png_folder_data
    import write_png_folder

    write_png_folder.write(tmp_path / "png", clients=2, train=24, test=12, seed=0)
    monkeypatch.setattr(png_folder_data, "ROOT", tmp_path / "png")
    flags = ["--set", "data.num_clients=2", "--set", "rounds=1", "--set", "dpfl.init_epochs=1"]
    config = str(root / "examples" / "png_folder.toml")
    result = CliRunner().invoke(app, ["simulate", config, *flags, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert (
        "Setting: png_folder_data:factory, N=2, own loader"
        in (tmp_path / "run" / "results.md").read_text()
    )
