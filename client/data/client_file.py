"""One participant's private data as a single file: what a client daemon is pointed at.

In a real federation every participant prepares its own file (or folder) and nobody else
reads it. The format is an uncompressed ``.npz`` (no pickle) with the three splits and a
small JSON header: ``x_train y_train x_val y_val x_test y_test`` (x float32 channel-first,
y int64) and ``meta`` (num_classes, input_shape, dataset, malicious).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import ArrayDataset
from .atomic import save_npz_atomic
from .clients import ClientData

SPLITS = ("train", "val", "test")


def save_client_file(data: ClientData, path: Path, *, num_classes: int, dataset: str) -> None:
    """Write ``data`` to ``path`` atomically."""
    meta = {
        "format": "collabfl-client-data-1",
        "client_id": data.client_id,
        "num_classes": num_classes,
        "input_shape": list(data.train.x.shape[1:]),
        "dataset": dataset,
        "malicious": data.malicious,
    }
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta))}
    for split in SPLITS:
        part: ArrayDataset = getattr(data, split)
        arrays[f"x_{split}"], arrays[f"y_{split}"] = part.x, part.y
    save_npz_atomic(path, arrays)


def load_client_file(path: Path) -> tuple[ClientData, dict[str, Any]]:
    """Read a client data file; ValueError naming the file for anything malformed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"client data file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as archive:
            meta = json.loads(str(archive["meta"]))
            splits = {
                split: ArrayDataset(archive[f"x_{split}"], archive[f"y_{split}"])
                for split in SPLITS
            }
    except (KeyError, ValueError, OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a collabfl client data file: {error}") from None
    if meta.get("format") != "collabfl-client-data-1":
        raise ValueError(f"{path}: unknown client data format {meta.get('format')!r}")
    shape = tuple(meta["input_shape"])
    for split, data in splits.items():
        if data.x.shape[1:] != shape:
            raise ValueError(f"{path}: {split} samples have shape {data.x.shape[1:]}, not {shape}")
        if len(data) and (data.y.min() < 0 or data.y.max() >= meta["num_classes"]):
            raise ValueError(f"{path}: {split} labels outside 0..{meta['num_classes'] - 1}")
    if len(splits["train"]) == 0 or len(splits["val"]) == 0:
        raise ValueError(f"{path}: the train and validation splits must not be empty")
    client = ClientData(
        client_id=int(meta["client_id"]),
        train=splits["train"],
        val=splits["val"],
        test=splits["test"],
        malicious=bool(meta["malicious"]),
    )
    return client, meta
