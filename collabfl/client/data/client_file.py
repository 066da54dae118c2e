"""One participant's private data as a single file: what a client daemon is pointed at.

In a real federation every participant prepares its own file (or folder) and nobody else
reads it. The format is an uncompressed ``.npz`` (no pickle) with the three splits and a
small JSON header: ``x_train y_train x_val y_val x_test y_test`` (x float32 channel-first,
y int64) and ``meta`` (num_classes, input_shape, dataset, malicious, and optionally the
partition the file's samples were drawn by, as a caption names it: "Dirichlet α=0.1").
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import ArrayDataset
from .atomic import save_npz_atomic
from .clients import ClientData

SPLITS = ("train", "val", "test")
FORMAT = "collabfl-client-data-1"


MAX_NAME = 100
"""Longest dataset or partition name a file may carry (it ends up in run records' titles)."""


def save_client_file(
    data: ClientData, path: Path, *, num_classes: int, dataset: str, partition: str = ""
) -> None:
    """Write ``data`` to ``path`` atomically (``partition``: how its samples were drawn),
    mode 0600: it is a participant's training data, which no other local user may read."""
    meta = {
        "format": FORMAT,
        "client_id": data.client_id,
        "num_classes": num_classes,
        "input_shape": list(data.train.x.shape[1:]),
        "dataset": dataset,
        "malicious": data.malicious,
    }
    if partition:
        meta["partition"] = partition
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta))}
    for split in SPLITS:
        part: ArrayDataset = getattr(data, split)
        arrays[f"x_{split}"], arrays[f"y_{split}"] = part.x, part.y
    save_npz_atomic(path, arrays, shared=False)


def load_client_file(path: Path) -> tuple[ClientData, dict[str, Any]]:
    """Read and validate a client data file; ValueError naming the file and the problem.

    The file comes from the participant, not from this code, so nothing in it is assumed:
    the header's fields have their types, the samples are finite and of the declared shape,
    the labels are integers of the declared classes. A bad file stops the daemon at start
    with one line instead of a traceback in the middle of a round.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"client data file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as archive:
            meta = json.loads(str(archive["meta"]))
            arrays = {name: archive[name] for name in _ARRAY_NAMES}
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path} is not a collabfl client data file: {error}") from None
    try:
        _check_meta(meta)
        splits = {split: _split(split, arrays, meta) for split in SPLITS}
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    if len(splits["train"]) == 0 or len(splits["val"]) == 0:
        raise ValueError(f"{path}: the train and validation splits must not be empty")
    client = ClientData(
        client_id=meta["client_id"],
        train=splits["train"],
        val=splits["val"],
        test=splits["test"],
        malicious=meta["malicious"],
    )
    return client, meta


_ARRAY_NAMES = tuple(f"{kind}_{split}" for split in SPLITS for kind in ("x", "y"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_meta(meta: Any) -> None:
    """The header's fields, each of its type (json gives str, float, bool for anything)."""
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise ValueError(f"unknown client data format {meta.get('format')!r}")
    if not _is_int(meta.get("num_classes")) or meta["num_classes"] < 2:
        raise ValueError(f"num_classes must be an int >= 2, got {meta.get('num_classes')!r}")
    if not _is_int(meta.get("client_id")) or meta["client_id"] < 0:
        raise ValueError(f"client_id must be an int >= 0, got {meta.get('client_id')!r}")
    shape = meta.get("input_shape")
    if not isinstance(shape, list) or not all(_is_int(n) and n > 0 for n in shape):
        raise ValueError(f"input_shape must be a list of positive ints, got {shape!r}")
    if not isinstance(meta.get("malicious"), bool):
        raise ValueError(f"malicious must be true or false, got {meta.get('malicious')!r}")
    for name in ("dataset", "partition"):
        if name in meta and not is_plain_name(meta[name]):
            raise ValueError(
                f"{name} must be one line of at most {MAX_NAME} printable characters, "
                f"got {meta[name]!r:.120}"
            )


def is_plain_name(value: Any) -> bool:
    """A short printable one-line string: what a participant may name its data with."""
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME and value.isprintable()


def _split(split: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> ArrayDataset:
    """One split's samples, checked against the header."""
    try:
        data = ArrayDataset(arrays[f"x_{split}"], arrays[f"y_{split}"])  # dtypes, lengths
    except ValueError as error:
        raise ValueError(f"{split} split: {error}") from None
    shape = tuple(meta["input_shape"])
    if data.x.shape[1:] != shape:
        raise ValueError(f"{split} samples have shape {data.x.shape[1:]}, not {shape}")
    if not np.isfinite(data.x).all():
        raise ValueError(f"{split} samples hold NaN or Inf values")
    classes = meta["num_classes"]
    if len(data) and (data.y.min() < 0 or data.y.max() >= classes):
        raise ValueError(f"{split} labels outside 0..{classes - 1}")
    return data
