"""Checks that a Flower symbol our code relies on is still there, and takes what we pass.

Where collabfl builds on Flower internals rather than a documented interface (the warm
executor, the reply pull), a test lists what it uses; an upgrade that moves or reshapes one
of them then fails that test by name instead of hanging a federation.
"""

from __future__ import annotations

import importlib
import inspect

import pytest


def assert_flower_has(module: str, symbol: str, parameters: list[str] | None, user: str) -> None:
    """``module.symbol`` exists and accepts ``parameters`` by name (None: only used); a
    protobuf message class is checked for those fields. ``user`` names who needs it."""
    where = f"{module}.{symbol}"
    try:
        target = importlib.import_module(module)
        for part in symbol.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{user} needs {where}, which this flwr lacks: {error}")
    if parameters is None:
        return
    if inspect.isclass(target) and target.__module__.endswith("_pb2"):
        accepted = set(target.DESCRIPTOR.fields_by_name)
    else:
        accepted = set(inspect.signature(target).parameters)
    missing = sorted(set(parameters) - accepted)
    assert not missing, f"{where} no longer takes {missing} (it takes {sorted(accepted)})"
