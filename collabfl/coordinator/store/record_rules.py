"""The rules a coordinator record obeys, and the errors that say which one a request broke.

The store (state.py) checks every value it is asked to write with these before it touches
the database, so a refused request changes nothing; the service maps the errors to gRPC
status codes (service_codec.py).
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any

from collabfl.coordinator.store.records import Coalitions, Edge

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""Run ids end up in file names, grants and URLs, so they stay plain."""


class NotFound(KeyError):
    """Something named in a request does not exist; the message says what."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


class UnknownRun(NotFound):
    pass


class UnknownRound(NotFound):
    pass


class UnknownMember(NotFound):
    pass


class InvalidRecord(ValueError):
    """A request whose content breaks a rule (bad index, weight, JSON, status, ...)."""


class RunConflict(ValueError):
    """A run with this id already exists with a different method or config."""


class RunNotActive(ValueError):
    """The run has ended, so it takes no more rounds, grants or stop requests."""


class StaleLaunch(ValueError):
    """A write carrying no launch token, or not the token of the run's latest launch."""


def check_run_id(run_id: object) -> None:
    """InvalidRecord unless ``run_id`` is plain: it ends up in file names, grants and URLs."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidRecord(
            f"run id {run_id!r} must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def check_node_id(flower_node_id: int) -> None:
    """A Flower node id is a uint64."""
    if not 0 <= flower_node_id < 2**64:
        raise InvalidRecord(f"flower_node_id {flower_node_id} is not a uint64")


def non_negative(name: str, value: object) -> int:
    """Indices, rounds and sizes as ints >= 0; numpy integers pass, bools are not counts."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise InvalidRecord(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)


def checked_edges(edges: Iterable[Edge]) -> list[Edge]:
    """Edges as (int, int, float), refusing negative indices, bad weights and duplicates."""
    result: list[Edge] = []
    seen: set[tuple[int, int]] = set()
    for i, j, weight in edges:
        source = non_negative("edge source i", i)
        target = non_negative("edge target j", j)
        w = float(weight) if isinstance(weight, numbers.Real) else math.nan
        if not math.isfinite(w) or w < 0:
            raise InvalidRecord(f"edge ({i}, {j}) has weight {weight!r}; it must be finite, >= 0")
        if (source, target) in seen:
            raise InvalidRecord(f"edge ({i}, {j}) listed twice")
        seen.add((source, target))
        result.append((source, target, w))
    return result


def checked_coalitions(coalitions: Iterable[Iterable[int]]) -> Coalitions:
    """Disjoint, non-empty member lists of client indices, in canonical order."""
    result: Coalitions = []
    owner: dict[int, int] = {}
    for index, coalition in enumerate(coalitions):
        if isinstance(coalition, str | bytes | Mapping) or not isinstance(coalition, Iterable):
            raise InvalidRecord(f"coalition {index} must be a list of client indices")
        members = [non_negative(f"coalition {index} member", c) for c in coalition]
        if not members:
            raise InvalidRecord(f"coalition {index} has no members; drop it or add its clients")
        for client in members:
            if owner.get(client) == index:
                raise InvalidRecord(f"client {client} listed twice in coalition {index}")
            if client in owner:
                raise InvalidRecord(
                    f"client {client} is in coalitions {owner[client]} and {index}; "
                    "coalitions must be disjoint"
                )
            owner[client] = index
        result.append(sorted(members))
    return sorted(result)


def checked_metrics(metrics: Mapping[int, Mapping[str, Any]]) -> dict[int, str]:
    """Each client's metrics as JSON text; only JSON objects keyed by client index pass."""
    result: dict[int, str] = {}
    for client, values in metrics.items():
        index = non_negative("metrics client id", client)
        if not isinstance(values, Mapping):
            raise InvalidRecord(f"metrics of client {client} must be a JSON object")
        try:
            result[index] = json.dumps(values, sort_keys=True, default=json_scalar)
        except (TypeError, ValueError) as error:
            raise InvalidRecord(f"metrics of client {client} are not JSON: {error}") from None
    return result


def json_scalar(value: Any) -> Any:
    """Let json write numpy scalars, which metrics code produces naturally."""
    if isinstance(value, numbers.Number) and hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
