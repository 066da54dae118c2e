"""Counts the model-sized tensor storages a block of code allocates and keeps alive.

A dispatch mode sees every tensor an operator returns; one whose storage is not an input's
is a fresh allocation (views and in-place results share an input's storage). Storages of at
least ``min_bytes`` are tracked until the last tensor on them is collected, and the peak of
their total is kept: on the CPU, the memory a step holds at once, without an allocator hook.
Dispatch modes are per thread: what other threads make is counted through ``track``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class StoragePeak(TorchDispatchMode):
    """Peak bytes of live storages of at least ``min_bytes`` allocated inside the block (on
    ``device_type`` alone when given: "cpu", "cuda")."""

    def __init__(self, min_bytes: int, device_type: str | None = None) -> None:
        super().__init__()
        self.min_bytes = min_bytes
        self.device_type = device_type
        self.live: dict[int, list[int]] = {}
        """data pointer -> [bytes, tensors still alive on it]"""
        self.current = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        result = func(*args, **(kwargs or {}))
        inputs = {_ptr(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(result)[0]:
            if isinstance(tensor, torch.Tensor) and _ptr(tensor) not in inputs:
                self.track(tensor)
        return result

    def track(self, tensor: torch.Tensor) -> None:
        """Count ``tensor``'s storage until the tensor is collected."""
        nbytes = tensor.untyped_storage().nbytes()
        if nbytes < self.min_bytes or self.device_type not in (None, tensor.device.type):
            return
        ptr = _ptr(tensor)
        with self._lock:
            entry = self.live.setdefault(ptr, [nbytes, 0])
            if entry[1] == 0:
                self.current += nbytes
                self.peak = max(self.peak, self.current)
            entry[1] += 1
        weakref.finalize(tensor, self._release, ptr)

    def _release(self, ptr: int) -> None:
        with self._lock:
            entry = self.live[ptr]
            entry[1] -= 1
            if entry[1] == 0:
                self.current -= entry[0]
                del self.live[ptr]


def _ptr(tensor: Any) -> int:
    return int(tensor.untyped_storage().data_ptr())
