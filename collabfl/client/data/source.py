"""A client's data from its lab's own loader: ``data.source = "pkg.mod:factory"``.

``factory(client_id)`` returns ``{"train": Split, "val": Split (optional), "test": Split,
"num_classes": int}``, a Split as the Python API takes it (client/data/user_splits.py).
The in-process runtime and a participant daemon both open a client's data through
``load_client`` here, so the two runtimes train on the same tensors by construction.

Train and test Datasets are streamed: their inputs stay in the Dataset and are read a batch
at a time. Before a run, ``check_sample`` reads a few items of every split of every client
and refuses, in one line naming client, split and field, what would fail later.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from collabfl.client.node import ClientSplits
from collabfl.kernel.samples import Samples
from collabfl.kernel.streamed import StreamedData
from collabfl.kernel.user_code import load_object

from .user_splits import Split, carve, samples, stacked

SPLITS = ("train", "val", "test")
REQUIRED = ("train", "test", "num_classes")
SAMPLE_ITEMS = 4
"""Items per split ``check_sample`` reads: enough to catch a wrong shape or label early
without reading a large set."""


class SourceError(ValueError):
    """A factory or what it returned is unusable; one line naming client, split and field."""


@dataclass(frozen=True)
class SourceSample:
    """What a factory's sample says of every client's data."""

    num_classes: int
    input_shape: tuple[int, ...]
    inputs: torch.Tensor
    """A few inputs of the first client's train split, for checking a model on."""


def call_factory(path: str, client_id: int, allowed: Collection[str] | None) -> dict[str, Any]:
    """``factory(client_id)``, its keys checked (``allowed``: a participant's own list)."""
    factory = load_object(path, allowed)
    if not callable(factory):
        raise SourceError(f"data.source {path} is not callable: give a factory(client_id)")
    fail = _failure(path, client_id)
    try:
        returned = factory(client_id)
    except Exception as error:  # the lab's loader: whatever it raises, said in one line
        raise fail("", "factory", f"raised {type(error).__name__}: {error}") from None
    if not isinstance(returned, Mapping):
        raise fail("", "return", f"a {type(returned).__name__}, not a dict of splits")
    missing = [key for key in REQUIRED if key not in returned]
    if missing:
        raise fail(
            "",
            "keys",
            f"missing {', '.join(missing)} (wanted: train, val, test, num_classes; val optional)",
        )
    unknown = sorted(set(returned) - {*REQUIRED, "val"})
    if unknown:
        raise fail("", "keys", f"unknown {', '.join(map(str, unknown))}")
    classes = returned["num_classes"]
    if not isinstance(classes, int | np.integer) or isinstance(classes, bool) or classes < 2:
        raise fail("", "num_classes", f"{classes!r} is not an int >= 2")
    return {**returned, "num_classes": int(classes)}


def check_sample(
    path: str, client_ids: Iterable[int], allowed: Collection[str] | None = None
) -> SourceSample:
    """Read a few items of every split of every client and check them against one another:
    inputs of one shape, labels in 0..num_classes-1, one num_classes for all."""
    first: SourceSample | None = None
    for k in client_ids:
        returned = call_factory(path, k, allowed)
        fail = _failure(path, k)
        classes = returned["num_classes"]
        if first is not None and classes != first.num_classes:
            raise fail("", "num_classes", f"{classes}, but client 0 has {first.num_classes}")
        for split in (s for s in SPLITS if s in returned):
            x, y = _sample(returned[split], path, k, split)
            shape = tuple(x.shape[1:])
            if first is None:
                first = SourceSample(classes, shape, x)
            elif shape != first.input_shape:
                raise fail(
                    split, "input", f"shape {shape}, but client 0's train has {first.input_shape}"
                )
            _check_labels(y, classes, fail, split)
    if first is None:
        raise SourceError(f"data.source {path}: no clients to check")
    return first


def check_model(
    path: str, module: nn.Module, inputs: torch.Tensor, num_classes: int, label: str
) -> None:
    """The model takes ``inputs`` (a few of client 0's train split) and gives one output
    per class; SourceError otherwise."""
    fail = _failure(path, 0)
    shape = tuple(inputs.shape[1:])
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            outputs = module(inputs.to(next(module.parameters()).device))
    except (RuntimeError, ValueError, TypeError) as error:
        first = (str(error).strip() or type(error).__name__).splitlines()[0]
        problem = f"model {label} refuses inputs of shape {shape}: {first}"
        raise fail("train", "input", problem) from None
    finally:
        module.train(was_training)
    if outputs.ndim != 2 or outputs.shape[1] != num_classes:
        raise fail(
            "train",
            "num_classes",
            f"model {label} gives outputs of shape {tuple(outputs.shape[1:])}, "
            f"not ({num_classes},)",
        )


def load_client(
    path: str,
    client_id: int,
    device: torch.device,
    val_fraction: float,
    seed: int,
    allowed: Collection[str] | None = None,
    workers: int = 0,
) -> tuple[ClientSplits, int]:
    """Client ``client_id``'s splits on ``device`` and its number of classes: Dataset train
    and test splits streamed (their items read once up front by ``workers`` DataLoader
    processes, for their labels), val stacked (given, or ``val_fraction`` of train drawn
    with ``seed``, as the Python API draws it)."""
    returned = call_factory(path, client_id, allowed)
    classes = returned["num_classes"]
    fail = _failure(path, client_id)
    try:
        where = {split: _where(path, client_id, split) for split in SPLITS}
        train = _streamed(returned["train"], where["train"], device, workers)
        test = _streamed(returned["test"], where["test"], device, workers)
        if "val" in returned:
            val = stacked(returned["val"], where["val"], device)
        else:
            train, val = carve(train, val_fraction, seed, client_id)
    except ValueError as error:  # user_splits' words, with where it happened in front
        raise SourceError(str(error)) from None
    for split, data in (("train", train), ("val", val), ("test", test)):
        _check_labels(data.y, classes, fail, split)
    return ClientSplits(train=train, val=val, test=test), classes


def _streamed(split: Split, where: str, device: torch.device, workers: int) -> Samples:
    """``split`` streamed; a Dataset with ``targets`` (one label per item, as torchvision's
    ImageFolder has) is not read up front at all: its labels are those, and each input is
    read, and its shape checked, when a batch needs it."""
    targets = getattr(split, "targets", None)
    if not isinstance(split, Dataset) or targets is None:
        return samples(split, where, device, True, workers)
    try:
        y = torch.as_tensor(np.asarray(targets))
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{where}, targets: not integer labels ({error})") from None
    try:
        size = len(split)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{where}: the Dataset has no len(); give a map-style Dataset") from None
    if y.ndim != 1 or len(y) != size or y.dtype not in _INTEGERS:
        raise ValueError(
            f"{where}, targets: {y.numel()} labels of {y.dtype} for {size} items; "
            "give one integer label per item"
        )
    first = torch.as_tensor(np.asarray(split[0][0]))
    rows = torch.arange(size)
    return StreamedData(split, rows, y.to(torch.int64).to(device), tuple(first.shape), device)


_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def train_size(
    path: str, client_id: int, val_fraction: float, allowed: Collection[str] | None = None
) -> tuple[int, int]:
    """Client ``client_id``'s training samples (after any val hold-out) and classes, from
    the factory's lengths alone: a participant's set-up answer reads no item."""
    returned = call_factory(path, client_id, allowed)
    size = _length(returned["train"], _failure(path, client_id), "train")
    if "val" not in returned:
        size -= max(1, round(val_fraction * size))
    return size, returned["num_classes"]


Failure = Callable[[str, str, str], SourceError]
"""Makes the one-line error of a split's field: (split, field, problem)."""


def _failure(path: str, client_id: int) -> Failure:
    """A function making the one-line error of ``client_id``'s ``split`` and ``field``."""

    def fail(split: str, field: str, problem: str) -> SourceError:
        where = f"client {client_id}" + (f", split {split}" if split else "")
        return SourceError(f"data.source {path}: {where}, {field}: {problem}")

    return fail


def _where(path: str, client_id: int, split: str) -> str:
    return f"data.source {path}: client {client_id}, split {split}"


def _length(split: Split, fail: Failure, name: str) -> int:
    if isinstance(split, tuple) and len(split) == 2:
        return len(split[1])
    try:
        return len(split)  # type: ignore[arg-type]
    except TypeError:
        raise fail(name, "len", "the Dataset has no len(); give a map-style Dataset") from None


def _sample(split: Split, path: str, k: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The first few (inputs, labels) of ``split``, stacked; SourceError naming the field."""
    fail = _failure(path, k)
    if isinstance(split, tuple):
        if len(split) != 2:
            raise fail(name, "items", f"a split of arrays is a pair (x, y), got {len(split)}")
        if len(split[0]) != len(split[1]):
            raise fail(name, "label", f"x has {len(split[0])} samples but y has {len(split[1])}")
        split = _Pairs(*split)
    if not isinstance(split, Dataset):
        raise fail(name, "items", f"a {type(split).__name__}, not a Dataset or a pair (x, y)")
    size = _length(split, fail, name)
    if size == 0:
        raise fail(name, "items", "the split is empty")
    picked = [split[i] for i in range(min(size, SAMPLE_ITEMS))]
    if any(not isinstance(item, tuple | list) or len(item) != 2 for item in picked):
        raise fail(name, "items", "an item is not an (input, label) pair")
    try:
        inputs = [torch.as_tensor(np.asarray(item[0])) for item in picked]
    except (TypeError, ValueError, RuntimeError) as error:
        raise fail(name, "input", f"not numeric array data ({error})") from None
    shapes = sorted({tuple(x.shape) for x in inputs})
    if len(shapes) > 1:
        raise fail(name, "input", f"items differ in shape: {shapes}")
    x = torch.stack(inputs)
    if x.dtype == torch.bool or x.is_complex():
        raise fail(name, "input", f"not numeric ({x.dtype})")
    if not torch.isfinite(x.to(torch.float32)).all():
        raise fail(name, "input", "NaN or infinite values")
    labels = [np.asarray(item[1]) for item in picked]
    if any(label.ndim != 0 or label.dtype.kind not in "iu" for label in labels):
        raise fail(name, "label", "labels must be integer class indices, one per item")
    return x.to(torch.float32), torch.as_tensor(np.stack(labels)).to(torch.int64)


class _Pairs(Dataset[Any]):
    """Arrays ``(x, y)`` read as items, for sampling them as a Dataset is sampled."""

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        return self.x[i], self.y[i]


def _check_labels(y: torch.Tensor, classes: int, fail: Failure, split: str) -> None:
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= classes):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise fail(split, "label", f"{bad} is outside 0..{classes - 1} (num_classes {classes})")
