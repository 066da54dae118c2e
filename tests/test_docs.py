"""The documentation points only at things that exist.

Every relative link in README.md, CONTRIBUTING.md and docs/*.md must lead to a file or
folder of the repository (and its ``#anchor`` to a heading there), and every repository
path the docs name in backticks (inline or in a fenced block: `client/data/client_file.py`,
`python benchmarks/peer_fetch.py`) must exist.
A moved or deleted file then fails here instead of leaving a dead pointer for a reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE = re.compile(r"`((?:[^`\n]|\n(?!\s*\n))+)`")  # may wrap, not across a blank line
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...
PLACEHOLDER = re.compile(r"[<>…{}$]|\.\.\.|NNNN")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)
TOP_FILES = {"README.md", "CONTRIBUTING.md", "LICENSE", "pyproject.toml", "install.py"}


def link_targets(text: str) -> list[tuple[str, str]]:
    """(file, anchor) of every ``[text](target)`` outside code, external URLs left out."""
    prose = INLINE.sub("", FENCE.sub("", text))
    targets = [m.group(1).partition("#")[::2] for m in LINK.finditer(prose)]
    return [(f, a) for f, a in targets if not EXTERNAL.match(f)]


def relative_links(text: str) -> list[str]:
    return [f for f, _ in link_targets(text) if f]


def anchors(text: str) -> set[str]:
    """The ids GitHub gives the headings of a markdown text."""
    ids = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n, unique = 0, slug
        while unique in ids:
            n += 1
            unique = f"{slug}-{n}"
        ids.add(unique)
    return ids


def code_spans(text: str) -> list[str]:
    """The text inside fenced blocks and inline backticks."""
    fenced = [m.group(0) for m in FENCE.finditer(text)]
    inline = INLINE.findall(FENCE.sub("", text))
    return fenced + inline


def repository_paths(text: str, top_level: set[str]) -> set[str]:
    """Words in code that name a path under one of the repository's top-level entries."""
    found = set()
    for span in code_spans(text):
        for word in re.split(r"[\s=,;()\[\]'\"]+", span):
            word = word.strip("`.:")
            if not word or PLACEHOLDER.search(word) or EXTERNAL.match(word):
                continue
            head = word.split("/", 1)[0]
            if ("/" in word and head in top_level) or word in TOP_FILES:
                found.add(word)
    return found


def exists(path: str) -> bool:
    if any(c in path for c in "*?"):
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def ignored_top_level_names() -> set[str]:
    """Plain names .gitignore ignores (``runs/``, ``build/``): what a command run in the
    checkout leaves there, such as the quickstart's ``runs/``, is not part of the repository."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    names = {line.strip().strip("/") for line in lines}
    return {n for n in names if n and not any(c in n for c in "*?[!/#")}


def top_level_entries() -> set[str]:
    ignored = ignored_top_level_names()
    return {p.name for p in ROOT.iterdir() if not p.name.startswith(".") and p.name not in ignored}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file(doc: Path) -> None:
    broken = [t for t in relative_links(doc.read_text()) if not (doc.parent / t).exists()]
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_anchor_leads_to_a_heading(doc: Path) -> None:
    broken = []
    for file, anchor in link_targets(doc.read_text()):
        target = doc.parent / file if file else doc
        is_doc = target.suffix == ".md" and target.is_file()
        if anchor and is_doc and anchor not in anchors(target.read_text()):
            broken.append(f"{file}#{anchor}")
    assert not broken, f"{doc.relative_to(ROOT)} links to missing headings: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_repository_path_exists(doc: Path) -> None:
    named = repository_paths(doc.read_text(), top_level_entries())
    missing = sorted(p for p in named if not exists(p))
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_checks_see_what_they_check() -> None:
    """The extractors find links and paths in the shapes the docs use, so a pass means
    something: a broken link and a missing path in a sample are both reported."""
    sample = (
        "See [the flow](deployment.md#ports) and [gone](missing.md), [web](https://x.org).\n"
        "`python benchmarks/peer_fetch.py --quick` and `client/nowhere.py`.\n"
        "```bash\ncollabfl compare examples/quickstart.toml\n```\n"
    )
    assert relative_links(sample) == ["deployment.md", "missing.md"]
    assert ("deployment.md", "ports") in link_targets(sample)
    assert {"ports", "step-by-step", "identities-and-what-each-may-do"} <= anchors(
        (ROOT / "docs" / "deployment.md").read_text()
    )
    named = repository_paths(sample, top_level_entries())
    assert named == {"benchmarks/peer_fetch.py", "client/nowhere.py", "examples/quickstart.toml"}
    assert [p for p in sorted(named) if not exists(p)] == ["client/nowhere.py"]


def test_what_the_quickstart_leaves_is_not_a_repository_path() -> None:
    """The README's first command writes ``runs/`` into the checkout; the docs' examples
    that write there (``--out runs/fed``) must not then read as repository paths."""
    assert "runs" in ignored_top_level_names()
    assert "runs" not in top_level_entries()
    assert repository_paths("`--out runs/fed`", top_level_entries() | {"runs"}) == {"runs/fed"}


def test_the_rooms_picture_is_what_the_code_imports():
    """docs/architecture.md's room picture is drawn from the import graph, never by hand."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("draw_rooms", ROOT / "docs" / "draw_rooms.py")
    draw_rooms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(draw_rooms)
    text = (ROOT / "docs" / "architecture.md").read_text()
    edges = draw_rooms.room_imports()
    assert ("strategies", "kernel") in edges and ("cli", "engine") in edges
    assert draw_rooms.drawn_document(text) == text, "stale: run python docs/draw_rooms.py"


DATA_FILE = re.compile(r"--data\s+(\S+\.npz)")
PREPARED_NAME = re.compile(r"client-(\d+|K)\.npz")
"""How `collabfl federation prepare` names a client's file (launcher/federation.py)."""


def test_a_participants_data_file_has_the_name_prepare_gives_it() -> None:
    """The README said `/data/lab-a.npz` where `prepare` writes `client-K.npz`: every data
    file the docs, the deploy files and the join's example pass as --data is named as
    `prepare` names it (issue #42, 7)."""
    from collabfl.client.join import EXAMPLE

    sources = {str(p.relative_to(ROOT)): p.read_text() for p in DOCS}
    for path in sorted((ROOT / "deploy").rglob("*")):
        if path.is_file() and path.suffix in {".md", ".service", ".yml"}:
            sources[str(path.relative_to(ROOT))] = path.read_text()
    sources["collabfl/client/join.py EXAMPLE"] = EXAMPLE
    named = {
        (where, m.group(1)) for where, text in sources.items() for m in DATA_FILE.finditer(text)
    }
    assert ("README.md", "/data/client-0.npz") in named
    assert [(w, f) for w, f in sorted(named) if not PREPARED_NAME.fullmatch(Path(f).name)] == []


def test_no_invite_line_in_the_docs_asks_the_coordinator_for_a_labs_path() -> None:
    invites = [
        line
        for path in DOCS
        for line in path.read_text().splitlines()
        if "admin invite --client-id" in line and line.lstrip().startswith("collabfl")
    ]
    assert invites and not [line for line in invites if "--data" in line]
