"""A user's per-client data, as datasets or arrays, turned into what every client trains on.

Each client has a train, a validation and a test split. A split is a map-style
``torch.utils.data.Dataset`` whose items are ``(input, label)`` pairs, or a pair of arrays
``(x, y)`` (numpy arrays or tensors) with the samples along the first axis. Either way the
samples are stacked once into tensors on the compute device, as the built-in datasets are,
unless the run streams: then a Dataset's train and test inputs stay in it and are read a
batch at a time (kernel/streamed.py), and only its labels are loaded. Validation splits are
stacked either way: GGC evaluates them thousands of times a round.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import Dataset

from collabfl.client.data.user_splits import Split, carve, samples, stacked
from collabfl.client.node import ClientSplits

__all__ = ["Split", "client_splits", "samples"]


def client_splits(
    train: Sequence[Split],
    val: Sequence[Split] | None,
    test: Sequence[Split],
    device: torch.device,
    val_fraction: float | None = None,
    seed: int = 0,
    stream: bool = False,
) -> list[ClientSplits]:
    """Every client's three splits on ``device``; ValueError naming the client and split
    when the lists disagree or a split is unusable. With ``val=None``, each client's
    validation split is ``val_fraction`` of its train split, drawn with ``seed``. With
    ``stream``, Dataset train and test splits are read a batch at a time."""
    if (val is None) == (val_fraction is None):
        raise ValueError(
            "give either val (one validation split per client) or val_fraction "
            "(carve it from each client's train split), not both or neither"
        )
    given = {"train": train, "val": val, "test": test} if val is not None else {}
    given = given or {"train": train, "test": test}
    for name, splits in given.items():
        if isinstance(splits, Dataset | tuple) or not isinstance(splits, Sequence):
            raise ValueError(f"{name} must be a list with one split per client")
    counts = {name: len(splits) for name, splits in given.items()}
    names = f"{', '.join(list(given)[:-1])} and {list(given)[-1]}"
    if len(set(counts.values())) != 1:
        raise ValueError(f"{names} must list the same clients; got {counts}")
    if not train:
        raise ValueError(f"no clients: {names} are empty lists")
    trains = [samples(split, f"train[{k}]", device, stream) for k, split in enumerate(train)]
    tests = [samples(split, f"test[{k}]", device, stream) for k, split in enumerate(test)]
    if val is None:
        pairs = [carve(data, val_fraction or 0.0, seed, k) for k, data in enumerate(trains)]
    else:
        pairs = [(data, stacked(val[k], f"val[{k}]", device)) for k, data in enumerate(trains)]
    return [
        ClientSplits(train=t, val=v, test=test) for (t, v), test in zip(pairs, tests, strict=True)
    ]
