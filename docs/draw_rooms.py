"""Draw the rooms of collabfl and the imports between them into docs/architecture.md.

The picture is read from the code (grimp, the import graph import-linter checks), so it
cannot drift: ``python docs/draw_rooms.py`` rewrites the block between the markers, and
tests/test_docs.py fails when the committed block differs from what the code draws.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

ARCHITECTURE = Path(__file__).with_name("architecture.md")
BEGIN = "<!-- rooms: drawn by docs/draw_rooms.py -->"
END = "<!-- end of rooms -->"

# Each room's place in the product and the seam it owns, as the picture labels it.
ROLES = {
    "cli": "the collabfl command",
    "api": "Python API",
    "launcher": "federation up",
    "apps": "Flower apps: ServerApp, ClientApp, pool adapter",
    "coordinator": "coordinator daemon",
    "engine": "experiment engine, in-process runtime",
    "client": "participant: PeerFetcher.hold, client daemon",
    "flower": "Flower runtime: processes, executor, auth",
    "strategies": "methods: ClientPool.send",
    "kernel": "shared kernel",
    "proto": "gRPC definitions",
}


def room_imports() -> set[tuple[str, str]]:
    """Every (room, other room) pair where a module of the first imports one of the second."""
    graph = grimp.build_graph("collabfl")
    edges: set[tuple[str, str]] = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            source, target = _room(module), _room(imported)
            if source and target and source != target:
                edges.add((source, target))
    return edges


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROLES else None


def mermaid(edges: set[tuple[str, str]]) -> str:
    """A mermaid flowchart: one node a room, one arrow a room that imports another."""
    lines = ["```mermaid", "flowchart TD"]
    lines += [f'    {room}["{room}/<br/>{role}"]' for room, role in ROLES.items()]
    lines += [f"    {a} --> {b}" for a, b in sorted(edges)]
    lines.append("```")
    return "\n".join(lines)


def drawn_document(text: str) -> str:
    """``text`` (architecture.md) with the rooms block replaced by a fresh drawing."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{mermaid(room_imports())}\n{END}{tail}"


def main() -> int:
    text = ARCHITECTURE.read_text()
    ARCHITECTURE.write_text(drawn_document(text))
    print(f"drew {len(room_imports())} room imports into {ARCHITECTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
