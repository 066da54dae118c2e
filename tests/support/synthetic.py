"""The collaboration-equilibrium paper's synthetic linear regression (Cui et al. 2022, §5.1).

Six clients regress y on x ∈ R^dim. Client i's true weights are u_i = v + r_i with one shared
v and a private perturbation r_i of scale ρ; clients 0–2 observe y = u_iᵀx + ε and clients
3–5 the flipped task y = −u_iᵀx + ε, so the two groups pull any shared model apart. The paper
reports the coalitions {0,1,2}, {3,4,5} at n = 2000, ρ = 0.1 and every client alone at
n = 20000, ρ = 1.0; whether pooling truly pays also depends on the noise (see DEFAULT_NOISE).

Generated locally from a seed; nothing is downloaded. Test and benchmark data only (the SPO
tests, benchmarks/equilibrium_synthetic.py): no client of the product loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NUM_CLIENTS = 6
"""Paper §5.1: six clients."""
TASK_SIGNS = (1.0, 1.0, 1.0, -1.0, -1.0, -1.0)
"""Paper §5.1: labels of clients 3–5 are flipped, giving two opposite tasks."""
DEFAULT_DIM = 20
"""Input dimension. The paper is silent; its official code defaults to ``input_dim = 20``."""
DEFAULT_NOISE = 0.01
"""Standard deviation σ of the label noise ε. The paper names σ but gives no value; the
official code draws ε with standard deviation 0.01 (``normal(0, sigma**2)``, sigma = 0.1),
which matches the paper's MSE of 1e-4 for lone clients in Table 1. At this noise a client
with 2000 samples fits its own u_i almost exactly, so exhaustive search over subsets (pooled
least squares) leaves every client alone even at ρ = 0.1, unlike the paper's Figure 4; SPO
still returns the two groups there (strategies/spo.py says why). Pooling a group beats
training alone roughly when σ²/n > ρ²/3, i.e. σ ≳ 3 for n = 2000, ρ = 0.1."""
VAL_FRACTION = 1 / 6
"""Share of each client's n samples held out for the SPO weight search. The paper holds out
17% on Adult and 13% on CIFAR-10; its official code holds out 1/6 of the target's samples."""
TEST_FRACTION = 0.5
"""Test samples per client, as a share of n, drawn on top of the n. The official code uses
``testN = 0.5 * trainN``; the paper does not say."""


@dataclass(frozen=True)
class RegressionSplit:
    """Inputs ``x`` (float32, samples × dim) and targets ``y`` (float32, samples)."""

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        if self.x.ndim != 2 or self.y.shape != (len(self.x),):
            raise ValueError(f"x must be (m, dim) and y (m,), got {self.x.shape}, {self.y.shape}")

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class SyntheticRegression:
    """Every client's train/val/test splits and the signed true weights ±u_i (rows)."""

    rho: float
    samples: int
    noise: float
    seed: int
    weights: np.ndarray
    train: tuple[RegressionSplit, ...]
    val: tuple[RegressionSplit, ...]
    test: tuple[RegressionSplit, ...]

    @property
    def num_clients(self) -> int:
        return len(self.train)

    @property
    def dim(self) -> int:
        return self.weights.shape[1]

    def split(self, client: int, name: str) -> RegressionSplit:
        """Client ``client``'s "train", "val" or "test" split."""
        if name not in ("train", "val", "test"):
            raise ValueError(f"split must be 'train', 'val' or 'test', got {name!r}")
        return getattr(self, name)[client]

    def client_arrays(self, client: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Client ``client``'s splits as {"train" | "val" | "test": (x, y)}."""
        return {
            name: (self.split(client, name).x, self.split(client, name).y)
            for name in ("train", "val", "test")
        }


def make_synthetic_regression(
    rho: float,
    samples: int,
    *,
    seed: int,
    dim: int = DEFAULT_DIM,
    noise: float = DEFAULT_NOISE,
) -> SyntheticRegression:
    """The benchmark with client spread ρ and n = ``samples`` per client (train + val).

    As in the paper: x ~ U[−1, 1]^dim, v ~ U[0, 1]^dim, r_i ~ N(0, ρ² I) (ρ is a standard
    deviation: the paper writes the variance as ρ²), ε ~ N(0, σ²).
    """
    if rho < 0 or not np.isfinite(rho):
        raise ValueError(f"rho must be finite and >= 0, got {rho}")
    if noise < 0 or not np.isfinite(noise):
        raise ValueError(f"noise must be finite and >= 0, got {noise}")
    val_size = int(samples * VAL_FRACTION)
    if val_size < 1 or samples - val_size < 1:
        raise ValueError(f"samples must leave at least one train and one val sample, got {samples}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    rng = np.random.default_rng(seed)
    shared = rng.uniform(0.0, 1.0, size=dim)
    weights = np.stack([sign * (shared + rng.normal(0.0, rho, size=dim)) for sign in TASK_SIGNS])
    test_size = max(1, int(samples * TEST_FRACTION))
    splits: dict[str, list[RegressionSplit]] = {"train": [], "val": [], "test": []}
    for w in weights:
        x = rng.uniform(-1.0, 1.0, size=(samples + test_size, dim))
        y = x @ w + rng.normal(0.0, noise, size=len(x))
        x, y = x.astype(np.float32), y.astype(np.float32)
        cuts = {"train": slice(0, samples - val_size), "val": slice(samples - val_size, samples)}
        cuts["test"] = slice(samples, None)
        for name, cut in cuts.items():
            splits[name].append(RegressionSplit(x[cut], y[cut]))
    return SyntheticRegression(
        rho=rho,
        samples=samples,
        noise=noise,
        seed=seed,
        weights=weights,
        train=tuple(splits["train"]),
        val=tuple(splits["val"]),
        test=tuple(splits["test"]),
    )
