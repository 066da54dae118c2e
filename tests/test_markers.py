"""The markers say what a test module starts, so ``-m "not federation"`` is the suite without
real federation processes and ``-m "not netns"`` the suite a machine without root can run.

A static scan, no test is run: a module starts a federation when it (or a helper it uses)
starts a process (``subprocess.Popen``), builds the launcher's loopback federation
(``LocalFederation``, ``run_on_federation``, ``federation_up``) or runs ``collabfl federation
up``; it needs network namespaces when it builds a ``NetworkBed`` (a helper naming ``ip
netns``). Helpers are the top-level functions and classes of tests/support/, the non-test
modules of tests/ and benchmarks/ that do one of these, found the same way (a helper that
calls another one counts too). Such a module carries the marker in its module-level
``pytestmark``; and a module marked ``federation`` starts one, or it would be missing from
the quick loop for nothing.
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
HELPER_FILES = (
    *sorted((TESTS / "support").glob("*.py")),
    *sorted(p for p in TESTS.glob("*.py") if not p.name.startswith(("test_", "conftest"))),
    *sorted((ROOT / "benchmarks").glob("*.py")),
)

PRODUCT_LAUNCHERS = frozenset({"LocalFederation", "run_on_federation", "federation_up"})
"""collabfl.launcher's ways to start a loopback federation (coordinator and client daemons,
hence a SuperLink and SuperNodes)."""
PROCESS = "Popen"

NOT_A_FEDERATION = {
    "test_socket_owner.py": "its one process is a plain Python socket of another user",
    "test_simulate_e2e.py": "its `federation up` is refused (device=cuda:99) before it starts",
    "test_client_join.py": "`collabfl-client join` retrying an unreachable coordinator, alone",
    "test_leftovers.py": "stand-ins for a daemon and its children: Python sleeping",
    "test_compare_interrupt.py": "`collabfl compare` and its workers, one machine (slow)",
}
"""Modules that start processes, but no federation, each with the reason: a new module that
starts one is marked ``federation`` or says here why not."""
SCANNER = Path(__file__).name


@dataclass
class Uses:
    """What a module's source uses, as the scan sees it."""

    names: set[str] = field(default_factory=set)
    """Every identifier: names, attributes, imported names."""
    qualified: set[tuple[str, str]] = field(default_factory=set)
    """(module, name) for ``from ...module import name`` and ``module.name``."""
    federation_up: bool = False
    """The strings of ``collabfl federation up``: "federation up" or "federation", "up"."""
    netns: bool = False
    """The string "netns" (an ``ip netns`` command)."""


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def uses(tree: ast.AST) -> Uses:
    found = Uses()
    modules: dict[str, str] = {}  # local alias -> the imported module's last name
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name.rpartition(".")[2]
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module.rpartition(".")[2]
            for alias in node.names:
                found.qualified.add((module, alias.name))
                found.names.add(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.names.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.names.add(node.attr)
            if isinstance(node.value, ast.Name) and node.value.id in modules:
                found.qualified.add((modules[node.value.id], node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.federation_up |= node.value == "federation up"
            found.netns |= node.value == "netns"
        elif isinstance(node, ast.List | ast.Tuple | ast.Call):
            items = node.args if isinstance(node, ast.Call) else node.elts
            words = [e.value for e in items if isinstance(e, ast.Constant)]
            found.federation_up |= any(
                pair == ("federation", "up") for pair in itertools.pairwise(words)
            )
    return found


@dataclass(frozen=True)
class Launchers:
    federation: frozenset[tuple[str, str]]
    netns: frozenset[tuple[str, str]]


@functools.cache
def helper_launchers(files: tuple[Path, ...]) -> Launchers:
    """The (module, name) of every top-level helper that starts a federation or a network
    namespace, directly or through another such helper (to a fixed point)."""
    definitions: dict[tuple[str, str], Uses] = {}
    for path in files:
        for node in parsed(path).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                definitions[(path.stem, node.name)] = uses(node)
    netns = {key for key, used in definitions.items() if used.netns}
    federation: set[tuple[str, str]] = set()
    while True:
        grown = set(federation)
        for key, used in definitions.items():
            if key in netns or key in grown:
                continue
            same_module = {(key[0], name) for name in used.names}
            calls = used.qualified | same_module
            if starts_federation(used) or calls & (federation | netns):
                grown.add(key)
        if grown == federation:
            return Launchers(frozenset(federation), frozenset(netns))
        federation = grown


def starts_federation(used: Uses) -> bool:
    return PROCESS in used.names or bool(PRODUCT_LAUNCHERS & used.names) or used.federation_up


def module_markers(tree: ast.Module) -> set[str]:
    """The markers of the module-level ``pytestmark`` (one mark or a list of them)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return {
                n.attr
                for n in ast.walk(node.value)
                if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Attribute)
                and n.value.attr == "mark"
            }
    return set()


def needed(path: Path, launchers: Launchers) -> set[str]:
    """The markers the module at ``path`` needs, by what it starts."""
    used = uses(parsed(path))
    markers = set()
    if used.qualified & launchers.netns:
        markers.add("netns")
    if starts_federation(used) or used.qualified & launchers.federation:
        markers.add("federation")
    if path.name in NOT_A_FEDERATION:
        markers.discard("federation")
    return markers


def test_modules_that_start_processes_carry_their_markers() -> None:
    launchers = helper_launchers(HELPER_FILES)
    missing, needless = [], []
    for path in sorted(TESTS.glob("test_*.py")):
        if path.name == SCANNER:
            continue  # its examples are strings
        want = needed(path, launchers)
        have = module_markers(parsed(path))
        missing += [f"{path.name}: {m}" for m in sorted(want - have)]
        if "federation" in have and "federation" not in want:
            needless.append(path.name)
    assert not missing, (
        "these modules start federation processes or network namespaces: add the marker to "
        f"their module-level pytestmark: {missing}"
    )
    assert not needless, (
        "marked federation but they start no federation process (the scan sees none): unmark "
        f"them, or teach tests/test_markers.py the launcher they use: {needless}"
    )


def test_the_allowances_name_modules_the_scan_flags() -> None:
    """An allowance for a module that no longer starts a process would hide a new one."""
    launchers = helper_launchers(HELPER_FILES)
    for name in NOT_A_FEDERATION:
        used = uses(parsed(TESTS / name))
        assert starts_federation(used) or used.qualified & launchers.federation, name


def test_the_scan_finds_the_helpers_that_start_federations() -> None:
    launchers = helper_launchers(HELPER_FILES)
    for helper in [
        ("tls_federation", "TlsCoordinator"),
        ("tls_superlink", "TlsSuperLink"),
        ("task_claims", "superexec_superlink"),
        ("federation_faults", "make_federation"),
        ("flower_floor", "measure_flower_floor"),
        ("gpu_workload", "measure"),
    ]:
        assert helper in launchers.federation, helper
    assert ("netns", "NetworkBed") in launchers.netns
    assert ("task_claims", "claim_task") not in launchers.federation  # an HTTP request


@pytest.mark.parametrize(
    ("source", "markers"),
    [
        ("import subprocess\nsubprocess.Popen(['sleep', '1'])", {"federation"}),
        ("from collabfl.launcher.federation import LocalFederation", {"federation"}),
        ("invoke(app, ['federation', 'up', '--out', 'x'])", {"federation"}),
        ("invoke('federation', 'up', *flags)", {"federation"}),
        ("from tests.support.tls_superlink import TlsSuperLink", {"federation"}),
        ("import gpu_workload\ngpu_workload.measure(1, 2, 3)", {"federation"}),
        ("from tests.support.netns import NetworkBed", {"netns"}),
        ("import subprocess\nsubprocess.run(['true'])", set()),
        ("from tests.support.task_claims import claim_task", set()),
    ],
)
def test_the_scan_fails_an_unmarked_module_that_starts_processes(
    tmp_path: Path, source: str, markers: set[str]
) -> None:
    """The check can fail: a module like these, unmarked, needs exactly ``markers``."""
    module = tmp_path / "test_example.py"
    module.write_text(source + "\n")
    assert needed(module, helper_launchers(HELPER_FILES)) == markers
    assert module_markers(ast.parse(source)) == set()
    marked = ast.parse("import pytest\npytestmark = [pytest.mark.federation, pytest.mark.netns]")
    assert module_markers(marked) == {"federation", "netns"}
