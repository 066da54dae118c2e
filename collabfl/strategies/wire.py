"""One wire encoding for the protocol's dataclasses: flat records of Flower-compatible values.

A task (strategies.verbs), a reply's metrics (strategies.metrics) or any other flat dataclass
becomes a dict whose keys are its field names and whose values are the scalars and scalar
lists a Flower ConfigRecord holds; decoding checks every key and value against the field's
type hint. Supported hints: ``int``, ``float``, ``str``, ``bytes``, ``bool``, a ``Literal``
of one of them, ``tuple[X, ...]`` of those (a list on the wire), and ``X | None``.

``None`` has exactly one encoding: the key is left out (Flower records cannot hold it), so
an optional field must default to None. Pure Python: both runtimes and the tests use it
without Flower.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

WireScalar = int | float | str | bytes | bool
WireValue = WireScalar | list[int] | list[float] | list[str] | list[bytes] | list[bool]
"""What one key of a record holds (the value types of a Flower ConfigRecord)."""

T = TypeVar("T", bound="DataclassInstance")

_KINDS: Mapping[object, type[WireScalar]] = {
    bool: bool,
    int: int,
    float: float,
    str: str,
    bytes: bytes,
}


@dataclass(frozen=True)
class _FieldSpec:
    """How one dataclass field travels."""

    name: str
    kind: type[WireScalar]
    choices: tuple[object, ...]
    """The allowed values of a Literal field (empty: any value of ``kind``)."""
    sequence: bool
    optional: bool
    required: bool


def encode(value: DataclassInstance) -> dict[str, WireValue]:
    """``value``'s fields as a flat record; None fields are left out.

    ValueError (naming the class and field) for a value that does not match its field's type.
    """
    record: dict[str, WireValue] = {}
    for spec in _specs(type(value)):
        where = f"{type(value).__name__}.{spec.name}"
        item = getattr(value, spec.name)
        if item is None:
            if not spec.optional:
                raise ValueError(f"{where} is None, which it cannot be")
            continue
        if spec.sequence:
            items = [
                _scalar(spec, v, f"{where}[{n}]") for n, v in enumerate(_sequence(item, where))
            ]
            record[spec.name] = _as_list(spec.kind, items)
        else:
            record[spec.name] = _scalar(spec, item, where)
    return record


def decode(cls: type[T], record: Mapping[str, object]) -> T:
    """The ``cls`` instance a record encodes.

    ValueError (naming the class and field) for an unknown key, a missing required field, a
    value of the wrong type, or a value the class's own checks refuse.
    """
    specs = _specs(cls)
    name = cls.__name__
    unknown = sorted(set(record) - {spec.name for spec in specs})
    if unknown:
        raise ValueError(f"{name}: unknown field {', '.join(map(repr, unknown))}")
    values: dict[str, object] = {}
    for spec in specs:
        where = f"{name}.{spec.name}"
        if spec.name not in record:
            if spec.required:
                raise ValueError(f"{name}: missing required field {spec.name!r}")
            continue
        value = record[spec.name]
        if spec.sequence:
            items = _sequence(value, where)
            values[spec.name] = tuple(
                _scalar(spec, v, f"{where}[{n}]") for n, v in enumerate(items)
            )
        else:
            values[spec.name] = _scalar(spec, value, where)
    make: Callable[..., T] = cls
    try:
        return make(**values)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


def _sequence(value: object, where: str) -> list[object] | tuple[object, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: expected a list, got {value!r}")
    return value


def _scalar(spec: _FieldSpec, value: object, where: str) -> WireScalar:
    """``value`` checked against the field's scalar type (an int is a valid float)."""
    if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, spec.kind) or (isinstance(value, bool) and spec.kind is not bool):
        expected = spec.kind.__name__
        raise ValueError(f"{where}: expected {expected}, got {type(value).__name__} {value!r}")
    if spec.choices and value not in spec.choices:
        raise ValueError(f"{where}: {value!r} is not one of {spec.choices}")
    return value


def _as_list(kind: type[WireScalar], items: list[WireScalar]) -> WireValue:
    """Checked ``items`` of ``kind`` as the one list type of that kind a record holds."""
    if kind is bool:
        return [v for v in items if isinstance(v, bool)]
    if kind is int:
        return [v for v in items if isinstance(v, int)]
    if kind is float:
        return [v for v in items if isinstance(v, float)]
    if kind is str:
        return [v for v in items if isinstance(v, str)]
    return [v for v in items if isinstance(v, bytes)]


@functools.cache
def _specs(cls: type[DataclassInstance]) -> tuple[_FieldSpec, ...]:
    hints = get_type_hints(cls)
    return tuple(_spec(cls.__name__, f, hints[f.name]) for f in fields(cls))


def _spec(owner: str, field: Field[object], hint: object) -> _FieldSpec:
    where = f"{owner}.{field.name}"
    required = field.default is MISSING and field.default_factory is MISSING
    optional = get_origin(hint) in (Union, UnionType) and NoneType in get_args(hint)
    if optional:
        others = [a for a in get_args(hint) if a is not NoneType]
        if len(others) != 1 or field.default is not None:
            raise TypeError(f"{where}: only X | None defaulting to None has a wire encoding")
        hint = others[0]
    sequence = get_origin(hint) is tuple
    if sequence:
        args = get_args(hint)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{where}: only tuple[X, ...] has a wire encoding")
        hint = args[0]
    choices: tuple[object, ...] = ()
    if get_origin(hint) is Literal:
        choices = get_args(hint)
        hint = type(choices[0])
        if any(type(c) is not hint for c in choices):
            raise TypeError(f"{where}: a Literal's values must share one type")
    kind = _KINDS.get(hint)
    if kind is None:
        raise TypeError(f"{where}: {hint!r} has no wire encoding")
    return _FieldSpec(field.name, kind, choices, sequence, optional, required)
