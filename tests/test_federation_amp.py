"""training.amp reaches the participants of a real federation: a bf16 run over loopback
gives exactly the in-process runtime's bf16 results, which differ from float32's."""

from __future__ import annotations

import json

from collabfl.engine.report.run_dir import read_run
from tests.support.cli_runs import invoke
from tests.support.runtime_equality import assert_same_rows, settings

CLIENTS = 2
ROUNDS = 2


def test_bf16_over_a_federation_equals_in_process_bf16(tmp_path):
    base = [*settings(CLIENTS, ROUNDS), f"data.cache_dir={json.dumps(str(tmp_path / 'cache'))}"]
    bf16 = [*base, "training.amp=bf16"]

    def flags(overrides: list[str]) -> list[str]:
        return [arg for o in overrides for arg in ("--set", o)]

    real, inprocess, plain = tmp_path / "real", tmp_path / "inprocess", tmp_path / "plain"
    invoke(
        "federation", "up", *flags(bf16), "--methods", "dpfl", "--out", str(real),
        "--timeout", "400",
    )  # fmt: skip
    invoke("compare", *flags(bf16), "--methods", "dpfl", "--out", str(inprocess))
    invoke("compare", *flags(base), "--methods", "dpfl", "--out", str(plain))
    assert_same_rows(real / "dpfl", inprocess / "dpfl", "dpfl", CLIENTS, ROUNDS)
    losses = [row["val_loss"] for row in read_run(inprocess / "dpfl").rows]
    assert losses != [row["val_loss"] for row in read_run(plain / "dpfl").rows]
