"""Compare methods on your own model and data over three seeds, as in a notebook.

Each ``# %%`` cell can be pasted into a notebook cell. Ten clients hold small noisy 8×8
images of four shapes; half the clients name the shapes differently (a label permutation),
so a client gains from its own group's models and loses from the others'. ``cf.compare``
runs every method once per seed and writes the results table and plots.

    python examples/compare_own_data.py [--rounds 8] [--out runs/own-data]
"""

# %% Imports and settings
from __future__ import annotations

import argparse
import tempfile

import numpy as np
import torch
from torch import nn

import collabfl.api as cf

SIDE, SHAPES, CLIENTS = 8, 4, 10


# %% Your model: any torch module (a class, a factory or an instance)
class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()
        )
        self.head = nn.Linear(8 * (SIDE // 2) ** 2, SHAPES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


# %% Your data: one (x, y) pair of arrays per client; val is carved out with val_fraction
def shapes() -> np.ndarray:
    """Four 8×8 templates: a bar, a column, a diagonal and a square."""
    templates = np.zeros((SHAPES, SIDE, SIDE), np.float32)
    templates[0, 3:5, :] = templates[1, :, 3:5] = 1.0
    templates[2][np.eye(SIDE, dtype=bool)] = 1.0
    templates[3, 2:6, 2:6] = 1.0
    return templates


def client_data(seed: int = 0) -> tuple[list, list]:
    """Every client's train and test arrays; clients 5-9 name the shapes differently."""
    rng = np.random.default_rng(seed)
    templates = shapes()

    def draw(n: int, renamed: bool) -> tuple[np.ndarray, np.ndarray]:
        shape = rng.integers(0, SHAPES, n)
        x = templates[shape] + rng.normal(0, 0.8, (n, SIDE, SIDE)).astype(np.float32)
        y = (shape + 1) % SHAPES if renamed else shape
        return x[:, None], y  # (n, 1, 8, 8) images, class labels

    groups = [k >= CLIENTS // 2 for k in range(CLIENTS)]
    train = [draw(int(rng.integers(20, 60)), g) for g in groups]
    test = [draw(200, g) for g in groups]
    return train, test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", help="output folder (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="collabfl-example-")

    # %% Compare: strings and typed method objects mix
    train, test = client_data()
    result = cf.compare(
        ["local", "fedavg_ft", cf.DPFL(budget=4)],
        model=SmallCNN,
        train=train,
        val=None,
        val_fraction=0.25,
        test=test,
        seeds=[0, 1, 2],
        rounds=args.rounds,
        epochs=2,
        lr=0.05,
        batch_size=16,
        out=out,
    )

    # %% Look at the results: a short repr, rows (or result.to_dataframe() with pandas)
    print(result)
    for row in result.rows():
        print(
            f"{row['method']:<14} {row['mean_test_acc'] * 100:.1f}% "
            f"± {row['std_across_seeds'] * 100:.1f} across seeds"
        )
    graph = result["dpfl:budget=4"].runs[0].graphs
    last = graph[max(graph)]
    same_group = sum(
        last[i, j] > 0
        for i in range(CLIENTS)
        for j in range(CLIENTS)
        if (i < CLIENTS // 2) == (j < CLIENTS // 2)
    )
    print(f"dpfl's last graph: {same_group} of {int((last > 0).sum())} edges within a group")
    print(f"plots: {out}/accuracy_by_round.png, {out}/accuracy_vs_variance.png")


if __name__ == "__main__":
    main()
