"""The inputs of each batch a loop visits, read ahead by DataLoader workers where that pays.

A ``TensorData`` split already sits on the device: indexing it is one gather, and nothing is
read ahead. A streamed split (kernel/streamed.py) reads every item from its Dataset in
Python; with ``training.loader_workers > 0`` that reading moves to worker processes, which
assemble the batches of the loop's own order ahead of it, in page-locked memory copied
without a host wait when the device is CUDA.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset

from collabfl.kernel.samples import Samples
from collabfl.kernel.streamed import Index, StreamedData

Batch = tuple[Index, Index]
"""A batch's positions twice: on the CPU (a streamed split's rows) and on the labels'
device (a tensor split's inputs and every split's labels)."""


class _Batches(Dataset[torch.Tensor]):
    """A streamed split whose item at a batch's rows is that batch's stacked inputs."""

    def __init__(self, data: StreamedData) -> None:
        self.data = data

    def __getitem__(self, rows: Index) -> torch.Tensor:
        return self.data.inputs(rows)


def batch_inputs(data: Samples, batches: Iterable[Batch], workers: int) -> Iterator[torch.Tensor]:
    """The inputs of ``batches`` in order, on the device of ``data``'s labels; ``batches``
    is read lazily (a few batches ahead with workers), never held whole."""
    if workers == 0 or not isinstance(data, StreamedData):
        if isinstance(data, StreamedData):  # its rows are on the CPU: no device-to-host copy
            return (data.inputs(host) for host, _ in batches)
        return (data.inputs(on_device) for _, on_device in batches)
    pinned = data.device.type == "cuda"
    host = data.on(torch.device("cpu"))
    loader = DataLoader(
        _Batches(host),
        sampler=(rows for rows, _ in batches),
        batch_size=None,
        num_workers=workers,
        pin_memory=pinned,
        multiprocessing_context=worker_context(),
    )
    return (batch.to(data.device, non_blocking=pinned) for batch in loader)


def worker_context() -> multiprocessing.context.BaseContext:
    """DataLoader workers forked from a fork server, not from this process: a participant's
    executor holds gRPC threads whose locks a fork would copy; the server, started once with
    torch imported, makes every later worker as cheap as a fork."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch"])
    return context
