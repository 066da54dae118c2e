"""Client data files for tests: a valid one, and the same file with one field spoiled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from collabfl.client.data.arrays import ArrayDataset
from collabfl.client.data.client_file import save_client_file
from collabfl.client.data.clients import ClientData


def write_client_data(path: Path, samples: int = 8) -> Path:
    """A small valid MNIST-1D-shaped client file (10 classes, samples of shape 1 x 40)."""
    rng = np.random.default_rng(0)

    def split() -> ArrayDataset:
        x = rng.normal(size=(samples, 1, 40)).astype(np.float32)
        return ArrayDataset(x, rng.integers(0, 10, samples))

    save_client_file(
        ClientData(0, split(), split(), split(), False), path, num_classes=10, dataset="x"
    )
    return path


def spoil(path: Path, *, meta: dict[str, Any] | None = None, **arrays: np.ndarray) -> Path:
    """Rewrite the file at ``path`` with header fields and arrays replaced."""
    with np.load(path, allow_pickle=False) as archive:
        content = {name: archive[name] for name in archive.files}
    header = json.loads(str(content["meta"])) | (meta or {})
    content["meta"] = np.array(json.dumps(header))
    np.savez(path, **(content | arrays))
    return path
