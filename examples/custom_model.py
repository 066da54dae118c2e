"""DPFL and Local on your own model and your own arrays, from Python.

Eight clients hold few samples of a 4-class problem. Half of them name the classes
differently (a label permutation), so a client gains from pooling with the clients of its
own group and loses from the others: DPFL has to find out who they are.

    python examples/custom_model.py [--rounds 10] [--out runs/custom]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

import collabfl.api as cf

NUM_CLASSES, FEATURES, CLIENTS = 4, 16, 8


class SmallNet(nn.Module):
    """Any torch module works; this one is a two-layer perceptron."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, NUM_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def make_clients(seed: int = 0) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Every client's (x, y) arrays for train, val and test."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, size=(NUM_CLASSES, FEATURES))
    relabel = np.array([1, 2, 3, 0])  # how the second group names the classes

    def sample(n: int, second_group: bool) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, NUM_CLASSES, size=n)
        x = centres[y] + rng.normal(0.0, 1.2, size=(n, FEATURES))
        return x.astype(np.float32), (relabel[y] if second_group else y).astype(np.int64)

    splits: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"train": [], "val": [], "test": []}
    for k in range(CLIENTS):
        second = k >= CLIENTS // 2
        for name, n in (("train", 24), ("val", 24), ("test", 200)):
            splits[name].append(sample(n, second))
    return splits


def adam_with_decay(params):
    """An optimiser factory: Adam, its learning rate halved every 20 local steps."""
    optimizer = torch.optim.Adam(params, lr=0.01)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", help="write each method's run directory under this folder")
    args = parser.parse_args()
    data = make_clients()
    settings = {"rounds": args.rounds, "epochs": 2, "training.batch_size": 8, "dpfl.budget": 3}
    for method in ("local", "dpfl"):
        result = cf.run(
            method,
            model=SmallNet,
            train=data["train"],
            val=data["val"],
            test=data["test"],
            optimizer=adam_with_decay,
            overrides=settings,
            out=f"{args.out}/{method}" if args.out else None,
        )
        per_client = " ".join(f"{c.best_test_acc:.2f}" for c in result.clients)
        print(
            f"{method:6s} mean test acc {result.mean_test_acc:.3f} ± {result.std_test_acc:.3f}"
            f"  per client: {per_client}"
        )


if __name__ == "__main__":
    main()
