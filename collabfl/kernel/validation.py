"""pydantic's validation errors as people read them: the field's dotted path, what is wrong
and the value given. Shared by the user's config and the settings that cross processes."""

from __future__ import annotations

from pydantic import ValidationError


def problems(error: ValidationError) -> list[str]:
    """One entry per problem: ``path.to.field: what is wrong (got value)``."""
    found = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"] if not _is_union_tag(part))
        given = problem.get("input")
        shown = "" if isinstance(given, dict) else f" (got {given!r})"
        found.append(f"{where or '(whole document)'}: {problem['msg']}{shown}")
    return found


def _is_union_tag(part: object) -> bool:
    """pydantic adds union member names (``int``, ``float``) to error paths; hide them."""
    return isinstance(part, str) and part in {"int", "float", "literal['inf']"}
