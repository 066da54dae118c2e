"""Model arithmetic a slice at a time, in place: a running sum or a candidate average costs
no model-sized temporaries, so a client holding Bc peer models needs at most one more
model's memory for its search (docs/performance.md, "Peer memory under the budget").

Every slice goes through the operations of the whole-vector expression it replaces, in the
same order (``s + w * p``, ``s - w * p``, ``s / t``). Those elementwise operations round each
element on its own, so the results are bit-identical to the whole-vector ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, Self, TypeVar


class Vector(Protocol):
    """What averaging needs of a model: vector-space arithmetic and slices that can be
    assigned (torch tensors, NumPy arrays)."""

    def __add__(self, other: Self, /) -> Self: ...

    def __sub__(self, other: Self, /) -> Self: ...

    def __mul__(self, scale: float, /) -> Self: ...

    def __truediv__(self, scale: float, /) -> Self: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice, /) -> Self: ...

    def __setitem__(self, index: slice, value: Self, /) -> None: ...


V = TypeVar("V", bound=Vector)

SLICE = 1 << 18
"""Elements per slice: 1 MiB of float32, the most a temporary here ever holds."""


def _slices(length: int) -> Iterator[slice]:
    for start in range(0, length, SLICE):
        yield slice(start, start + SLICE)


def add_scaled(running: V, vector: V, scale: float, subtract: bool = False) -> None:
    """``running = running + vector * scale`` (``-`` when ``subtract``), in place."""
    for part in _slices(len(running)):
        weighted = vector[part] * scale
        running[part] = running[part] - weighted if subtract else running[part] + weighted


def divide(running: V, total: float) -> None:
    """``running = running / total``, in place."""
    for part in _slices(len(running)):
        running[part] = running[part] / total


def average_into(
    out: V,
    base: V,
    total: float,
    *,
    base_scale: float | None = None,
    plus: Sequence[tuple[V, float]] = (),
    minus: Sequence[tuple[V, float]] = (),
) -> None:
    """``out = (base [* base_scale] + Σ w * p - Σ w * p) / total``, the sums in ``plus``'s
    order, then ``minus``'s; ``out`` may live on another device than the operands (a GPU
    workspace fed from host memory) and receives each slice by copy."""
    for part in _slices(len(base)):
        value = base[part] if base_scale is None else base[part] * base_scale
        for vector, scale in plus:
            value = value + vector[part] * scale
        for vector, scale in minus:
            value = value - vector[part] * scale
        out[part] = value / total
