"""The plain-Flower anchor of benchmarks/federation_round.py runs a real federation: each
round FedAvg aggregates trained weights from every SuperNode and the timeline covers every
round (a run whose clients did not train, or which lost a round, fails here)."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from flower_floor import measure_flower_floor

pytestmark = pytest.mark.federation


def test_flower_floor_rounds_change_the_weights(tmp_path: Path) -> None:
    figures = measure_flower_floor(2, 2, 3, tmp_path, samples=64, timeout_s=300)

    rounds = figures["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    for r in rounds:
        assert r["train_replies"] == 2
        assert r["weight_change"] > 1e-6
        assert 0 < r["slowest_train_s"] < r["train_phase_s"] < r["wall_s"]
        assert not math.isnan(r["accuracy"])
    assert 0 < figures["launch_to_online_s"] < figures["launch_to_first_round_s"]
