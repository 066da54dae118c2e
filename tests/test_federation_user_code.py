"""User code over a real federation: a model factory, an optimiser and a ``data.source``
factory, all named by import path, in bf16, on the ``subprocess`` runtime.

``collabfl federation up`` starts every party on loopback and gives every client daemon
``--data pkg.mod:factory`` and ``--allow-import`` for the code the config names. Each daemon
calls the factory with its own client id and trains the user's model with the user's
optimiser; the results equal the in-process runtime's on the same seed and config, which
calls the factory per client id too. The factory gives no val split, so each side holds
``data.val_fraction`` of train out by the run's seed: the run settings carry it. The run
trains in bf16, so the same comparison shows that ``training.amp`` reaches the participants
(bf16's results differ from float32's).

The daemons run the ``subprocess`` runtime (a fresh ClientApp process per message), the one
federation of the suite that does: each process must import the user's code anew and resume
the node from its saved state, and still match (test_federation_e2e.py runs the warm one).
Every message starts a process that imports torch, so this federation is the smallest that
still exchanges and resumes: 2 clients (each may take the other as its one peer), 2 rounds.
One federation for all of it: starting one costs more CPU than the rounds it runs.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from collabfl.engine.report.run_dir import read_run
from tests.support.cli_runs import IN_THIS_PROCESS, invoke
from tests.support.runtime_equality import assert_same_rows

pytestmark = pytest.mark.federation

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "tests.support.sources:blobs"
CLIENTS = 2
ROUNDS = 2
SETTINGS = [
    f"data.source={SOURCE}",
    f"data.num_clients={CLIENTS}",
    "data.val_fraction=0.25",
    "model.name=tests.support.user_code:make_net",
    "training.optimizer=tests.support.user_code:make_adam",
    f"rounds={ROUNDS}",
    "epochs=0.5",
    "dpfl.init_epochs=1",
    "dpfl.budget=1",
]


@pytest.fixture
def importable_tests(monkeypatch):
    """The daemons' processes import tests.support from this checkout."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def test_user_code_in_bf16_over_a_federation_equals_in_process(tmp_path, importable_tests):
    flags = [arg for o in SETTINGS for arg in ("--set", o)]
    bf16 = [*flags, "--set", "training.amp=bf16"]
    real, inprocess, plain = tmp_path / "real", tmp_path / "inprocess", tmp_path / "plain"
    invoke(
        "federation", "up", *bf16, "--methods", "dpfl", "--runtime", "subprocess",
        "--out", str(real), "--timeout", "400",
    )  # fmt: skip
    invoke("compare", *bf16, *IN_THIS_PROCESS, "--methods", "dpfl", "--out", str(inprocess))
    invoke("compare", *flags, *IN_THIS_PROCESS, "--methods", "dpfl", "--out", str(plain))
    assert_same_rows(real / "dpfl", inprocess / "dpfl", "dpfl", CLIENTS, ROUNDS)

    config = json.loads((real / "dpfl" / "config.json").read_text())
    assert config["resolved"]["model_bytes"] == (40 * 10 + 10) * 4  # the user's model
    assert (config["data"]["dataset"], config["data"]["partition"]) == (SOURCE, "own loader")
    assert not (real / "federation" / "data").exists()  # no client file was written
    assert config["training"]["amp"] == "bf16"
    losses = [row["val_loss"] for row in read_run(inprocess / "dpfl").rows]
    assert losses != [row["val_loss"] for row in read_run(plain / "dpfl").rows]

    clients = sorted((real / "federation").glob("client-*"))
    assert len(clients) == CLIENTS
    for client in clients:  # every message served by a process of its own
        served = re.findall(r"task (\w+) by pid (\d+)", (client / "executor.log").read_text())
        assert len(served) > 2 and {status for status, _ in served} == {"completed"}, served
        assert len({pid for _, pid in served}) == len(served), served
