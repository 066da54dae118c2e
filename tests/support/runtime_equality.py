"""The small federation the end-to-end tests run, and how they compare runtimes.

A real federation (processes, sockets, TLS) must give exactly the in-process runtime's
per-client results on the same seed and config; this is the config and the comparison
that tests/test_federation_e2e.py and tests/test_multihost.py share.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collabfl.engine.report.run_dir import read_run

BUDGET = 1
CLIENTS = 3
ROUNDS = 3


def settings(clients: int = CLIENTS, rounds: int = ROUNDS) -> list[str]:
    """The config overrides of the federation with ``clients`` clients and ``rounds`` rounds
    (a test whose every message starts a process may want a smaller one)."""
    return [
        "data.num_train=1500",
        "data.num_test=600",
        f"data.num_clients={clients}",
        f"rounds={rounds}",
        "epochs=0.5",
        "dpfl.init_epochs=1",
        f"dpfl.budget={BUDGET}",
    ]


SETTINGS = settings()


def assert_same_rows(
    real_dir: Path, inprocess_dir: Path, method: str, clients: int = CLIENTS, rounds: int = ROUNDS
) -> None:
    """Every (round, client) row of the two run directories agrees (accuracy to 1e-9)."""
    real, inprocess = read_run(real_dir).rows, read_run(inprocess_dir).rows
    assert len(real) == len(inprocess) == clients * rounds
    for a, b in zip(real, inprocess, strict=True):
        assert (a["round"], a["client"]) == (b["round"], b["client"])
        for key in ("best_test_acc", "test_acc", "val_acc"):
            assert a[key] == pytest.approx(b[key], abs=1e-9), (a["round"], a["client"], key)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)
        assert a["num_collaborators"] == b["num_collaborators"]
        assert a["bytes_fetched"] == b["bytes_fetched"]
        assert a["coordinator_bytes"] == b["coordinator_bytes"]
        if method == "ipfl":
            assert a["utility"] == pytest.approx(b["utility"], rel=1e-6, abs=1e-9)
