"""A federation's run records describe the run that happened: the clients that joined and
what their data files say, not the TOML's defaults.

Before, a 3-client federation's plots were titled "mnist1d, N=50, Dirichlet α=0.1" because
the operator's TOML said 50 and ``--clients 3`` passed without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from collabfl.apps.run_setup import Description
from collabfl.apps.server_app import federation_data, requested_data, rewritten
from collabfl.apps.session import describe
from collabfl.client.data.arrays import ArrayDataset
from collabfl.client.data.client_file import save_client_file
from collabfl.client.data.clients import ClientData
from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.recording import MethodRecorder
from collabfl.engine.report.run_dir import read_run
from collabfl.engine.report.setting import setting_title

DIRICHLET = "Dirichlet α=0.1"


def _client_file(path: Path, client_id: int, partition: str = DIRICHLET) -> Path:
    x = ArrayDataset(np.zeros((4, 1, 40), np.float32), np.zeros(4, np.int64))
    data = ClientData(client_id, x, x, x, False)
    save_client_file(data, path, num_classes=10, dataset="mnist1d", partition=partition)
    return path


def _described(tmp_path: Path, partitions: list[str]) -> list[Description]:
    return [
        describe(k, _client_file(tmp_path / f"c{k}.npz", k, p), f"lab-{k}:9400")
        for k, p in enumerate(partitions)
    ]


def test_the_record_names_the_clients_that_joined_and_their_data(tmp_path: Path) -> None:
    described = _described(tmp_path, [DIRICHLET] * 3)
    assert (described[0].dataset, described[0].partition) == ("mnist1d", DIRICHLET)
    data = federation_data(described)
    assert data == {"num_clients": 3, "dataset": "mnist1d", "partition": DIRICHLET}

    spec = parse_method_spec("dpfl", load_config(None, ["data.num_clients=50", "rounds=1"]))
    asked = requested_data(spec)
    assert asked["num_clients"] == 50 and data != asked
    assert "data.num_clients 50 -> 3" in rewritten(asked, data)

    MethodRecorder(spec, tmp_path / "run", 3, "mlp", 100, data=data)
    config = read_run(tmp_path / "run").config
    assert config["data"] == data
    assert setting_title(config) == f"mnist1d, N=3, {DIRICHLET}"
    assert "N=50" not in json.dumps(config["data"])


def test_participants_with_different_data_are_named_each() -> None:
    described = [
        Description(0, 10, 10, "a:1", dataset="mnist1d", partition="IID"),
        Description(1, 10, 10, "b:1", dataset="mnist1d", partition=DIRICHLET),
        Description(2, 10, 10, "c:1"),  # an older file without a partition
    ]
    data = federation_data(described)
    assert data["dataset"] == "mnist1d (clients 0, 1); unnamed (clients 2)"
    assert data["partition"] == f"{DIRICHLET} (clients 1); IID (clients 0); unnamed (clients 2)"


@pytest.mark.parametrize("name", ["x" * 101, "two\nlines", "\x1b[31mred", ""])
def test_a_participant_cannot_put_arbitrary_text_in_the_records(name: str) -> None:
    with pytest.raises(ValueError, match="partition must be a short printable"):
        Description(0, 10, 10, "a:1", partition=name)
