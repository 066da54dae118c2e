"""User code over a real federation: a model factory and an optimiser named by import path.

``collabfl federation up`` starts every party on loopback; its client daemons allow the code
the config names (``--allow-import``), train the user's model with the user's optimiser,
and give exactly the in-process runtime's results on the same seed and config. They run the
``subprocess`` runtime (a fresh ClientApp process per message), the one federation
of the suite that does: each of those processes must import the user's code anew and resume
the node from its saved state, and still match. (test_federation_e2e.py runs the warm one.)

Every message here starts a process that imports torch (seconds of CPU each), so this
federation is the smallest that still exchanges and resumes: 2 clients (each may take the
other as its one peer) and 2 rounds, the second resumed from the state the first saved.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support.cli_runs import invoke
from tests.support.runtime_equality import assert_same_rows, settings

pytestmark = pytest.mark.federation

ROOT = Path(__file__).resolve().parents[1]
USER_CODE = [
    "model.name=tests.support.user_code:make_net",
    "training.optimizer=tests.support.user_code:make_adam",
]
CLIENTS = 2
ROUNDS = 2


@pytest.fixture
def importable_tests(monkeypatch):
    """The daemons' processes import tests.support.user_code from this checkout."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def test_user_code_over_a_federation_equals_in_process(tmp_path, importable_tests):
    overrides = [
        *settings(CLIENTS, ROUNDS),
        *USER_CODE,
        f"data.cache_dir={json.dumps(str(tmp_path / 'cache'))}",
    ]
    flags = [arg for o in overrides for arg in ("--set", o)]
    real, inprocess = tmp_path / "real", tmp_path / "inprocess"
    invoke(
        "federation", "up", *flags, "--methods", "dpfl", "--runtime", "subprocess",
        "--out", str(real), "--timeout", "400",
    )  # fmt: skip
    invoke("compare", *flags, "--methods", "dpfl", "--out", str(inprocess))
    assert_same_rows(real / "dpfl", inprocess / "dpfl", "dpfl", CLIENTS, ROUNDS)
    resolved = json.loads((real / "dpfl" / "config.json").read_text())["resolved"]
    assert resolved["model_bytes"] == (40 * 10 + 10) * 4  # the user's model, not the zoo's
    clients = sorted((real / "federation").glob("client-*"))
    assert len(clients) == CLIENTS
    for client in clients:  # every message served by a process of its own
        served = re.findall(r"task (\w+) by pid (\d+)", (client / "executor.log").read_text())
        assert len(served) > 2 and {status for status, _ in served} == {"completed"}, served
        assert len({pid for _, pid in served}) == len(served), served
