"""benchmarks/train_throughput.py times the same work on both sides: collabfl's local
training and the bare PyTorch loop reach the same losses from the same batches."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import train_throughput  # noqa: E402


def test_both_sides_train_the_same_model_on_the_same_batches():
    args = argparse.Namespace(
        model="cifar_cnn", batch_size=8, steps=6, repeats=2, amp="off", channels_last=False
    )
    figures = train_throughput.measure(args, torch.device("cpu"))
    losses = figures["mean_loss"]
    assert len(losses["collabfl"]) == 2
    assert losses["collabfl"] == pytest.approx(losses["bare PyTorch"], rel=1e-5)
    assert figures["ratio"] > 0 and figures["ratio_cpu_time"] > 0
