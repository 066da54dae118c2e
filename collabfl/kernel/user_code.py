"""User code named by an import path ``pkg.mod:attr``: a model factory, a loss, an optimiser.

A config names such code as text, so it travels in TOML files and run requests. Resolving a
name imports a module, which runs code: on a participant that name may come from the
coordinator, so ``load_object`` takes the participant's own allow-list and refuses anything
else before importing anything. Modules come from the Python path (``PYTHONPATH``, installed
packages), never from the working directory (kernel/python_command.py says why).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Collection

_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class UserCodeError(ValueError):
    """An import path that is malformed, not allowed here, or does not resolve."""


def is_import_path(text: str) -> bool:
    """Whether ``text`` names user code (``pkg.mod:attr``) rather than a built-in choice."""
    return ":" in text


def check_import_path(text: str) -> str:
    """``text`` if it is a well-formed ``pkg.mod:attr``; UserCodeError otherwise."""
    if not _IMPORT_PATH.fullmatch(text):
        raise UserCodeError(
            f"{text!r} is not an import path: write module:attribute, e.g. 'mylab.models:make_net'"
        )
    return text


def parse_allowed(values: Collection[str]) -> frozenset[str]:
    """A participant's allow-list, each entry checked, so a typo fails when it starts."""
    return frozenset(check_import_path(value.strip()) for value in values if value.strip())


def check_allowed(path: str, allowed: Collection[str]) -> None:
    """UserCodeError unless ``path`` is on a participant's own ``allowed`` list."""
    if path not in allowed:
        listed = ", ".join(sorted(allowed)) or "none"
        raise UserCodeError(
            f"import path {path!r} is not allowed on this participant (allowed: {listed}); "
            "its operator allows one with collabfl-client --allow-import"
        )


def check_findable(paths: Collection[str]) -> None:
    """UserCodeError naming the first of ``paths`` whose top-level package is nowhere on the
    Python path, so that a participant hears it when it starts rather than from its first
    run's message. Nothing is imported."""
    for path in sorted(paths):
        top = check_import_path(path).split(":")[0].split(".")[0]
        if importlib.util.find_spec(top) is None:
            raise UserCodeError(f"cannot import {path!r}: {_not_on_path(top)}")


def _not_on_path(module: str) -> str:
    """Why ``module`` cannot be imported, and what makes it importable."""
    return (
        f"no module named {module!r} on the Python path; install its package, or put the "
        "folder that holds it on PYTHONPATH (collabfl's commands do not search the working "
        "directory)"
    )


def load_object(path: str, allowed: Collection[str] | None = None) -> object:
    """The object ``path`` names, imported.

    ``allowed`` (a participant's own list; None: the caller's own config, trusted) is checked
    first, so a path it lacks imports nothing.
    """
    check_import_path(path)
    if allowed is not None:
        check_allowed(path, allowed)
    module_name, attribute = path.split(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        if missing is not None and f"{module_name}.".startswith(f"{missing}."):
            raise UserCodeError(f"cannot import {path!r}: {_not_on_path(missing)}") from None
        raise UserCodeError(f"cannot import {path!r}: {error}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UserCodeError(f"cannot import {path!r}: {module_name} has no {attribute!r}")
        target = getattr(target, part)
    return target
