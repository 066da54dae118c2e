"""The sub-step relay over mutual TLS in a real federation (``federation up --tls``): each
ClientApp dials the coordinator service with its member certificate, the ServerApp with the
coordinator's, and FedCollab's distance steps travel through it, not as Flower messages."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from collabfl.coordinator.cli import app
from collabfl.coordinator.report.run_dir import MESSAGES_FILE, read_run

SETTINGS = [
    "data.num_train=1500",
    "data.num_test=600",
    "data.num_clients=3",
    "rounds=2",
    "epochs=0.5",
    "fedcollab.distance_rounds=5",
]


def test_fedcollab_steps_cross_the_relay_over_tls(tmp_path):
    flags = [arg for setting in SETTINGS for arg in ("--set", setting)]
    flags += ["--set", f"data.cache_dir={json.dumps(str(tmp_path / 'cache'))}"]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["federation", "up", "--tls", *flags, "--methods", "fedcollab", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    run = read_run(out / "fedcollab")
    assert sorted({row["client"] for row in run.rows if row["round"] == 1}) == [0, 1, 2]
    records = [json.loads(line) for line in (out / "fedcollab" / MESSAGES_FILE).open()]
    rounds = [r["round"] for r in records if r["kind"] == "message"]
    assert rounds.count(0) == rounds.count(1) > 0  # the 5 distance steps took no message
    seats = sorted((r["round"], r["client"], r["steps"]) for r in records if r["kind"] == "seat")
    assert seats == [(0, k, 5) for k in range(3)]  # one seat each, serving all 5 steps
    for k in range(3):
        log = (out / "federation" / f"client-{k}" / "supernode.log").read_text()
        assert log.count("Receiving: query.substeps") == 1
        assert "query.discriminate" not in log
