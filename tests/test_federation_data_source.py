"""A ``data.source`` factory and ``training.amp`` over a real federation, in one run.

``federation up`` gives every client daemon ``--data pkg.mod:factory`` (and
``--allow-import`` for it), each daemon calls it with its own client id, and the results equal
the in-process runtime's on the same seed and config, which calls it per client id too. The
factory gives no val split, so each side holds ``data.val_fraction`` of train out by the run's
seed: the federation's run settings carry it. The run trains in bf16, so the same comparison
shows that ``training.amp`` reaches the participants: bf16's results differ from float32's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collabfl.engine.report.run_dir import read_run
from tests.support.cli_runs import IN_THIS_PROCESS, invoke
from tests.support.runtime_equality import assert_same_rows

pytestmark = pytest.mark.federation

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 2
ROUNDS = 2
SOURCE = "tests.support.sources:blobs"


def test_a_factory_in_bf16_over_a_federation_equals_in_process(tmp_path, monkeypatch):
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))  # the daemons import the factory
    overrides = [
        f"data.source={SOURCE}",
        f"data.num_clients={CLIENTS}",
        "data.val_fraction=0.25",
        f"rounds={ROUNDS}",
        "epochs=0.5",
        "dpfl.init_epochs=1",
        "dpfl.budget=1",
    ]
    flags = [arg for o in overrides for arg in ("--set", o)]
    bf16 = [*flags, "--set", "training.amp=bf16"]
    real, inprocess, plain = tmp_path / "real", tmp_path / "inprocess", tmp_path / "plain"
    invoke("federation", "up", *bf16, "--methods", "dpfl", "--out", str(real), "--timeout", "400")
    invoke("compare", *bf16, *IN_THIS_PROCESS, "--methods", "dpfl", "--out", str(inprocess))
    invoke("compare", *flags, *IN_THIS_PROCESS, "--methods", "dpfl", "--out", str(plain))
    assert_same_rows(real / "dpfl", inprocess / "dpfl", "dpfl", CLIENTS, ROUNDS)
    assert not (real / "federation" / "data").exists()  # no client file was written
    config = json.loads((real / "dpfl" / "config.json").read_text())
    assert (config["data"]["dataset"], config["data"]["partition"]) == (SOURCE, "own loader")
    assert config["training"]["amp"] == "bf16"
    losses = [row["val_loss"] for row in read_run(inprocess / "dpfl").rows]
    assert losses != [row["val_loss"] for row in read_run(plain / "dpfl").rows]
