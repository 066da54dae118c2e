"""pydantic's validation errors as people read them: the field's dotted path, what is wrong
and the value given. Shared by the user's config and the settings that cross processes."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from pydantic import BaseModel, ValidationError


def problems(error: ValidationError, schema: type[BaseModel] | None = None) -> list[str]:
    """One entry per problem: ``path.to.field: what is wrong (got value)``; with the
    ``schema`` that was validated, a misspelt key also gets the field it was likely meant
    to be (``training.lrr``: did you mean ``lr``?)."""
    found = []
    for problem in error.errors():
        loc = [part for part in problem["loc"] if not _is_union_tag(part)]
        where = ".".join(str(part) for part in loc)
        given = problem.get("input")
        shown = "" if isinstance(given, dict) else f" (got {given!r})"
        hint = _did_you_mean(schema, loc) if problem["type"] == "extra_forbidden" else ""
        found.append(f"{where or '(whole document)'}: {problem['msg']}{shown}{hint}")
    return found


def _did_you_mean(schema: type[BaseModel] | None, loc: Sequence[object]) -> str:
    """The closest field names beside an unknown key, found by walking ``schema``."""
    section: object = schema
    for part in loc[:-1]:
        fields = getattr(section, "model_fields", {})
        if part not in fields:
            return ""
        section = fields[part].annotation
    names = list(getattr(section, "model_fields", {}))
    close = difflib.get_close_matches(str(loc[-1]), names, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _is_union_tag(part: object) -> bool:
    """pydantic adds union member names (``int``, ``float``) to error paths; hide them."""
    return isinstance(part, str) and part in {"int", "float", "literal['inf']"}
