"""What a participant's ``--data`` names, opened: a client data file, or a ``data.source``
factory (``pkg.mod:factory``) of its operator's own loader.

The daemon checks it at start, the ClientApp opens it per run and doctor checks it as the
daemon does. A factory is imported only when the operator's ``--allow-import`` lists it,
as a model factory is; torch is imported only once one is called.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collabfl.kernel.user_code import check_allowed, is_import_path

from .client_file import load_client_file

if TYPE_CHECKING:
    import torch

    from collabfl.client.node import ClientSplits

DataRef = Path | str
"""A data file, or (a str) the import path of a ``data.source`` factory."""

OWN_LOADER = "own loader"
"""The partition a factory's data reports (engine/report/setting.py names it so too)."""


def data_ref(text: str | Path) -> DataRef:
    """``text`` as ``--data`` means it: an import path stays text, anything else is a file."""
    text = str(text)
    return text if is_import_path(text) and not Path(text).exists() else Path(text)


@dataclass(frozen=True)
class DataFacts:
    """What a participant says of its data at a run's set-up."""

    num_samples: int
    num_classes: int
    dataset: str | None
    partition: str | None


def check_data(ref: DataRef, client_id: int, allowed: Collection[str]) -> str:
    """One line on ``ref``'s data; ValueError (or FileNotFoundError) in one line naming
    what is wrong: a factory's client, split and field, or the file and its problem."""
    if isinstance(ref, Path):
        client, meta = load_client_file(ref)
        sizes = f"{len(client.train)} train, {len(client.val)} val, {len(client.test)} test"
        return f"data file {ref}: {sizes} samples, {meta['num_classes']} classes"
    from .source import check_sample

    check_allowed(ref, allowed)
    sample = check_sample(ref, [client_id], allowed)
    shape = "×".join(map(str, sample.input_shape))
    return (
        f"data.source {ref}: client {client_id}, a sample of every split valid, inputs "
        f"{shape}, {sample.num_classes} classes"
    )


def open_data(
    ref: DataRef,
    client_id: int,
    device: torch.device,
    val_fraction: float,
    seed: int,
    allowed: Collection[str],
    workers: int = 0,
) -> tuple[ClientSplits, int]:
    """This client's splits on ``device`` and its number of classes (``workers``: DataLoader
    processes reading a factory's Datasets)."""
    from collabfl.client.node import ClientSplits

    if isinstance(ref, Path):
        data, meta = load_client_file(ref)
        return ClientSplits.from_data(data, device), int(meta["num_classes"])
    from .source import load_client

    return load_client(ref, client_id, device, val_fraction, seed, allowed, workers)


def describe_data(
    ref: DataRef, client_id: int, val_fraction: float, allowed: Collection[str]
) -> DataFacts:
    """What this client reports of its data; a factory's items are not read for it."""
    if isinstance(ref, Path):
        data, meta = load_client_file(ref)
        return DataFacts(
            len(data.train), int(meta["num_classes"]), meta.get("dataset"), meta.get("partition")
        )
    from .source import train_size

    size, classes = train_size(ref, client_id, val_fraction, allowed)
    return DataFacts(size, classes, ref, OWN_LOADER)
