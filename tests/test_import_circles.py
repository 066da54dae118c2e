"""No module of collabfl imports itself back through others.

lint-imports (pyproject.toml) keeps the rooms in layers; this keeps the modules inside a room
in an order too. The graph is grimp's, the one import-linter reads: lazy (function-level) and
``TYPE_CHECKING`` imports count, so a circle cannot hide in a function. An import by a name
in a string (importlib) is no edge here: name no module above you that way either.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import grimp


def circles(imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in imports.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_circles_finds_a_circle_and_nothing_else() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_collabfl_is_in_an_import_circle() -> None:
    graph = grimp.build_graph("collabfl", include_external_packages=False)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert circles(imports) == []
