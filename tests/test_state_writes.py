"""Every file the product writes goes through kernel/atomic.py, save the outputs listed here.

A state file written in place (``open(path, "w")``, ``Path.write_bytes``, ``torch.save``...)
is half a file after a crash, and one renamed into place without syncing its folder can
vanish after a power cut; kernel/atomic.py does both right. This test reads the product's
source and fails on any other write: of a file opened for writing, a ``write_text`` or
``write_bytes`` method, a library writer (numpy, torch, safetensors, json, pickle, shutil,
matplotlib, networkx), a rename, a temporary file or an ``os.open`` for writing. A write
to the temporary path that ``with replacing(...) as tmp`` yields (or to a file opened on
it) is the helper's own protocol and passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "collabfl"
HELPER = Path("kernel/atomic.py")

ALLOWED: dict[tuple[str, str, str], str] = {
    # Append-only logs: a line at a time, read by people and by `tail`; replacing the whole
    # file per line would cost a copy of the log each time.
    ("engine/report/run_dir.py", "_append", "open"): "metrics.jsonl, one record a line",
    ("launcher/federation.py", "LocalFederation._spawn", "open"): "a daemon's log (stdout)",
    (
        "coordinator/superlink/flower_runs.py",
        "LogFollower._copy",
        "open",
    ): "the ServerApp's log, as the SuperLink streams it",
    ("flower/serverapp_template.py", "ServerAppTemplate._ensure_running", "open"): (
        "the ServerApp template's log (stderr)"
    ),
    ("flower/serverapp_template.py", "_serve", "os.open"): "a ServerApp's log (stdout)",
    ("kernel/supervisor.py", "Supervisor._spawn", "open"): "a supervised process's log",
    # Rotation of those logs and of messages.jsonl by size: whole files moved or copied
    # aside; losing a rotated log to a power cut costs no state.
    ("kernel/log_rotation.py", "_shift", "replace"): "an older rotated log moved up",
    ("kernel/log_rotation.py", "rotate", "replace"): "a record file moved aside",
    ("kernel/log_rotation.py", "rotate_copy", "copyfile"): "a running process's log copied",
    # Files written whole through the helper beside their place, then renamed into it.
    ("client/join.py", "enrol", "replace"): "an accepted enrolment's keys, from .enrolling",
    # Outputs for people, rebuilt from the run's records whenever they are missing.
    ("engine/report/plots.py", "_save", "savefig"): "a plot (PNG)",
    ("cli/admin/graphs.py", "export", "write_graphml"): "a graph export the user asked for",
    # The developer's tool that regenerates the gRPC modules into the source tree.
    ("proto/generate.py", "generate", "copy"): "the .proto sources into a scratch folder",
    ("proto/generate.py", "main", "copy"): "generated modules into the source tree",
}
"""(file, enclosing function, writer) -> what is written and why not through the helper."""

_WRITE_MODE = frozenset("wax+")
_WRITERS: dict[str, frozenset[str]] = {
    # name -> the modules it is called on that make it a file writer ("": a bare name)
    "save": frozenset({"np", "numpy", "torch"}),
    "savez": frozenset({"np", "numpy", ""}),
    "savez_compressed": frozenset({"np", "numpy", ""}),
    "save_file": frozenset({"safetensors", "torch", ""}),  # safetensors.torch.save_file
    "dump": frozenset({"json", "pickle"}),
    "copy": frozenset({"shutil"}),
    "copy2": frozenset({"shutil", ""}),
    "copyfile": frozenset({"shutil", ""}),
    "move": frozenset({"shutil"}),
    "mkstemp": frozenset({"tempfile", ""}),
    "NamedTemporaryFile": frozenset({"tempfile", ""}),
    "rename": frozenset({"os"}),  # (Path.rename/replace move a file that was written first)
    "replace": frozenset({"os"}),
}
_ANY_OWNER = frozenset({"savefig", "write_graphml", "write_text", "write_bytes"})
"""Writers whatever they are called on (the bare write_text/write_bytes are kernel.atomic's)."""
_OS_WRITE_FLAGS = frozenset({"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"})


def product_sources() -> list[Path]:
    """The .py files of every room (the packages under collabfl/), relative to collabfl/."""
    return sorted(
        path.relative_to(PACKAGE)
        for path in PACKAGE.rglob("*.py")
        if "_pb2" not in path.name and path.parent != PACKAGE
    )


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _mode(call: ast.Call, position: int, unknown: str) -> str:
    """The mode argument ("r" when absent); ``unknown`` when it is not a literal."""
    node = next((k.value for k in call.keywords if k.arg == "mode"), None)
    if node is None and len(call.args) > position:
        node = call.args[position]
    if node is None:
        return "r"
    is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
    return node.value if is_text else unknown


def writer_kind(call: ast.Call) -> str | None:
    """What kind of file write ``call`` is, or None when it writes no file."""
    name = _name(call.func)
    method = isinstance(call.func, ast.Attribute)
    owner = _name(call.func.value) if isinstance(call.func, ast.Attribute) else ""
    if name == "open" and owner == "os":
        flags = {
            n.attr for a in call.args[1:2] for n in ast.walk(a) if isinstance(n, ast.Attribute)
        }
        return "os.open" if flags & _OS_WRITE_FLAGS else None
    if name == "open" and method and owner != "io":
        mode = _mode(call, 0, "r")  # Path.open(mode); other objects' open() take no mode
    elif name in ("open", "fdopen"):
        mode = _mode(call, 1, "w")  # open(path, mode), os.fdopen(fd, mode): assume the worst
    elif name in _ANY_OWNER:
        return name if method or name not in ("write_text", "write_bytes") else None
    else:
        return name if owner in _WRITERS.get(name, ()) else None
    return "open" if _WRITE_MODE & set(mode) else None


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scope: list[str] = []
        self.temporaries: set[str] = set()
        """Names bound to a ``replacing`` temporary, or to a file opened on one."""
        self.found: list[tuple[str, str, int]] = []

    def _nested(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _nested

    def visit_With(self, node: ast.With) -> None:
        bound: set[str] = set()
        for item in node.items:
            self.visit(item.context_expr)
            target = item.optional_vars
            if not isinstance(target, ast.Name) or not isinstance(item.context_expr, ast.Call):
                continue
            call = item.context_expr
            if _name(call.func) == "replacing" or self._on_temporary(call):
                bound.add(target.id)
                self.temporaries.add(target.id)
        for statement in node.body:
            self.visit(statement)
        self.temporaries -= bound

    def _on_temporary(self, call: ast.Call) -> bool:
        arguments = [*call.args, *(k.value for k in call.keywords)]
        return any(
            isinstance(n, ast.Name) and n.id in self.temporaries
            for argument in arguments
            for n in ast.walk(argument)
        ) or (
            isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id in self.temporaries
        )

    def visit_Call(self, node: ast.Call) -> None:
        kind = writer_kind(node)
        if kind is not None and not self._on_temporary(node):
            self.found.append((".".join(self.scope) or "<module>", kind, node.lineno))
        self.generic_visit(node)


def scan(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function, writer, line) of each write in ``source`` not done the safe way."""
    scanner = _Scanner()
    scanner.visit(ast.parse(source))
    return scanner.found


def test_every_product_file_is_written_through_the_atomic_helper() -> None:
    writes = {
        (str(path), scope, kind): line
        for path in product_sources()
        if path != HELPER
        for scope, kind, line in scan((PACKAGE / path).read_text())
    }
    unexpected = [f"{p}:{line} {scope}: {kind}" for (p, scope, kind), line in writes.items()]
    unexpected = [u for (key, u) in zip(writes, unexpected, strict=True) if key not in ALLOWED]
    assert not unexpected, (
        "write these through collabfl.kernel.atomic (write_bytes, write_text, replacing), "
        "or add a non-state output to ALLOWED with its reason:\n" + "\n".join(unexpected)
    )
    stale = sorted(set(ALLOWED) - set(writes))
    assert not stale, f"ALLOWED lists writes that are gone: {stale}"


@pytest.mark.parametrize(
    "source",
    [
        "open(path, 'w')",
        "open(path, mode='ab')",
        "open(path, flags)",
        "path.open('wb')",
        "os.fdopen(fd, 'w')",
        "path.write_text(text)",
        "path.write_bytes(data)",
        "np.save(path, array)",
        "torch.save(state, path)",
        "save_file(tensors, path)",
        "json.dump(record, handle)",
        "shutil.copyfile(a, b)",
        "os.replace(a, b)",
        "tempfile.mkstemp(dir=folder)",
        "os.open(path, os.O_WRONLY | os.O_CREAT)",
        "with replacing(target) as tmp:\n    pass\nopen(tmp, 'w')",
    ],
)
def test_the_scan_finds_each_way_of_writing(source: str) -> None:
    assert [kind for _, kind, _ in scan(source)], source


@pytest.mark.parametrize(
    "source",
    [
        "open(path)",
        "open(path, 'rb')",
        "path.open()",
        "name.replace('-', '_')",
        "os.open(folder, os.O_RDONLY)",
        "write_text(path, text)",
        "with replacing(target) as tmp:\n    tmp.write_bytes(data)",
        "with replacing(target) as tmp, open(tmp, 'wb') as f:\n    np.savez(f, **arrays)",
        "with replacing(target) as tmp:\n    save_file(tensors, str(tmp))",
    ],
)
def test_the_scan_passes_reads_and_the_helpers_protocol(source: str) -> None:
    assert scan(source) == []
