"""A user's split, as a Dataset or arrays, turned into what training reads.

A split is a map-style ``torch.utils.data.Dataset`` whose items are ``(input, label)``
pairs, or a pair of arrays ``(x, y)`` (numpy arrays or tensors) with the samples along the
first axis. It is stacked once into tensors on the compute device, or, streamed, its inputs
stay in the Dataset and are read a batch at a time (kernel/streamed.py). Both the Python API
(api/data.py) and a ``data.source`` factory (client/data/source.py) come through here, so a
participant daemon and the in-process runtime read a split the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from collabfl.kernel.loader import worker_context
from collabfl.kernel.samples import Samples, TensorData
from collabfl.kernel.streamed import StreamedData

Split = Dataset[Any] | tuple[Any, Any] | StreamedData
"""One split of one client: a Dataset of (input, label) items, or arrays (x, y); or, from
``compare``, a Dataset it has already loaded for streaming."""


def carve(data: Samples, fraction: float, seed: int, k: int) -> tuple[Samples, TensorData]:
    """Client ``k``'s train split, less a random ``fraction`` held out as its val split
    (stacked, as every val split is)."""
    if not 0 < fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {fraction!r}")
    count = max(1, round(fraction * len(data.y)))
    if count >= len(data.y):
        raise ValueError(
            f"train[{k}] has {len(data.y)} samples: too few to keep any for training "
            f"after holding out val_fraction={fraction}"
        )
    generator = torch.Generator().manual_seed(seed * 100_003 + k)
    order = torch.randperm(len(data.y), generator=generator).to(data.y.device)
    held, kept = order[:count], order[count:]
    return data.subset(kept), _stacked_subset(data, held)


def _stacked_subset(data: Samples, index: torch.Tensor) -> TensorData:
    """The samples at ``index``, their inputs in memory."""
    return TensorData(data.inputs(index), data.y[index])


def samples(
    split: Split, where: str, device: torch.device, stream: bool, workers: int = 0
) -> Samples:
    """One split on ``device``: streamed when asked and it is a Dataset, else stacked
    (``workers``: DataLoader processes reading a streamed Dataset's items once)."""
    if isinstance(split, StreamedData):
        return split.on(device)
    if stream and isinstance(split, Dataset):
        return streamed(split, where, device, workers)
    return stacked(split, where, device)


def streamed(
    dataset: Dataset[Any], where: str, device: torch.device, workers: int = 0
) -> StreamedData:
    """``dataset`` for reading a batch at a time: every item is read once now, to check it
    as a stacked split's items are checked and to keep its label; its input is not kept.
    With ``workers``, a DataLoader's processes read (and decode) the items, in order."""
    shape: tuple[int, ...] | None = None
    labels = []
    for i, (x, label) in enumerate(_items(dataset, where, workers)):
        _inputs(x.unsqueeze(0), f"{where} item {i}")
        if shape is None:
            shape = tuple(x.shape)
        elif tuple(x.shape) != shape:
            raise ValueError(f"{where}: inputs differ in shape: {shape} and {tuple(x.shape)}")
        labels.append(label)
    y = _labels(torch.stack(labels).reshape(-1), len(labels), where)
    rows = torch.arange(len(labels))
    return StreamedData(dataset, rows, y.to(device), shape or (), device)


def stacked(split: Split, where: str, device: torch.device) -> TensorData:
    """One split as float32 inputs and int64 labels on ``device``."""
    if isinstance(split, StreamedData):
        return TensorData(split.inputs(slice(None)).to(device), split.y.to(device))
    if isinstance(split, tuple):
        if len(split) != 2:
            raise ValueError(f"{where}: a split of arrays is a pair (x, y), got {len(split)} items")
        x, y = _as_tensor(split[0], where, "x"), _as_tensor(split[1], where, "y")
    elif isinstance(split, Dataset):
        x, y = _stack(split, where)
    else:
        kind = type(split).__name__
        raise ValueError(f"{where}: expected a torch Dataset or a pair of arrays, got a {kind}")
    return TensorData(_inputs(x, where).to(device), _labels(y, len(x), where).to(device))


def _items(
    dataset: Dataset[Any], where: str, workers: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Each item of ``dataset`` as (input, label) tensors, read by ``workers`` DataLoader
    processes when there are any; ValueError for a Dataset without len(), an empty one, or
    an item that is not such a pair."""
    try:
        size = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{where}: the Dataset has no len(); give a map-style Dataset") from None
    if size == 0:
        raise ValueError(f"{where} is empty")
    read: Iterable[Any] = (dataset[i] for i in range(size))
    if workers:
        read = DataLoader(
            dataset,
            batch_size=None,
            num_workers=workers,
            collate_fn=_as_read,
            multiprocessing_context=worker_context(),
        )
    for i, item in enumerate(read):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise ValueError(f"{where}: item {i} is not an (input, label) pair")
        x = _as_tensor(item[0], where, f"item {i}'s input")
        yield x, _as_tensor(item[1], where, f"item {i}'s label")


def _as_read(item: Any) -> Any:
    """A DataLoader's item as the Dataset gave it (no conversion: ``_items`` checks it)."""
    return item


def _stack(dataset: Dataset[Any], where: str) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, labels = [], []
    for x, label in _items(dataset, where):
        inputs.append(x)
        labels.append(label)
    shapes = {tuple(t.shape) for t in inputs}
    if len(shapes) != 1:
        raise ValueError(f"{where}: inputs differ in shape: {sorted(shapes)}")
    return torch.stack(inputs), torch.stack(labels).reshape(-1)


def _as_tensor(value: Any, where: str, what: str) -> torch.Tensor:
    try:
        return torch.as_tensor(np.asarray(value) if not torch.is_tensor(value) else value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{where}: {what} is not numeric array data ({error})") from None


def _inputs(x: torch.Tensor, where: str) -> torch.Tensor:
    if x.ndim == 0 or len(x) == 0:
        raise ValueError(f"{where} is empty: give at least one sample")
    if not (x.is_floating_point() or x.dtype in _INTEGER_DTYPES):
        raise ValueError(f"{where}: x must be numeric, got {x.dtype}")
    x = x.to(torch.float32)
    if not torch.isfinite(x).all():
        raise ValueError(f"{where}: x holds NaN or infinite values")
    return x


def _labels(y: torch.Tensor, num_samples: int, where: str) -> torch.Tensor:
    if y.ndim != 1:
        raise ValueError(f"{where}: y must hold one label per sample (1-D), got {tuple(y.shape)}")
    if y.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"{where}: labels must be integers (class indices), got {y.dtype}")
    if len(y) != num_samples:
        raise ValueError(f"{where}: x has {num_samples} samples but y has {len(y)}")
    if int(y.min()) < 0:
        raise ValueError(f"{where}: labels must be >= 0, got {int(y.min())}")
    return y.to(torch.int64)


_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
