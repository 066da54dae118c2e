"""benchmarks/gpu_workload.py on its CI-sized workload: images on disk through a data.source
factory, DPFL in process and as a real federation, a round broken into phases that add up,
peers fetched and never more held than the budget allows, the same accuracies both ways."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_workload  # noqa: E402

pytestmark = pytest.mark.federation


def test_the_tiny_workload_runs_both_runtimes_and_its_figures_add_up(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the daemons import collabfl from here
    work = gpu_workload.TINY
    figures = gpu_workload.measure(work, gpu_workload.RUNTIMES, tmp_path)
    assert figures["bare_images_per_s"] > 0
    assert (tmp_path / "data" / "client-0" / "train_x.npy").stat().st_size > 0
    runtimes = figures["runtimes"]
    assert sorted(runtimes) == sorted(gpu_workload.RUNTIMES)
    for runtime, got in runtimes.items():
        phases = got["steady_round_s"]
        assert all(phases[p] >= 0 for p in gpu_workload.PHASES), (runtime, phases)
        assert phases["train"] > 0 and phases["round"] > 0
        assert phases["train"] + phases["evaluate"] <= phases["round"] + 1e-6, (runtime, phases)
        assert 0 < got["peak_peer_models"] <= work.budget + 1
        assert got["peer_bytes_fetched"] >= figures["model_bytes"]  # a DPFL round fetches
        assert got["images_per_s"] > 0
    accuracies = [got["mean_test_acc"] for got in runtimes.values()]
    assert accuracies[0] == pytest.approx(accuracies[1], abs=1e-9)
