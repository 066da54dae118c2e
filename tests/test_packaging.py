"""What is installed is whole: every product package is in the wheel and in the image, and
every third-party package the product imports is a declared dependency (not one that only
arrives because another package happens to require it today)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

DEV_TOOLS = {Path("proto/generate.py")}
"""Modules run by developers only: their imports may come from the ``dev`` extra."""


PACKAGE = ROOT / "collabfl"


def product_packages() -> set[str]:
    """The rooms: the folders under collabfl/ that are Python packages."""
    return {d.name for d in PACKAGE.iterdir() if (d / "__init__.py").is_file()}


def _normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _declared(requirements: list[str]) -> set[str]:
    return {_normal(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


def _runtime_imports(path: Path) -> set[str]:
    """Top-level modules ``path`` imports, less those imported only for type checking."""
    tree = ast.parse(path.read_text())
    checking_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for statement in block.body
        for n in ast.walk(statement)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in checking_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"collabfl", "__future__"}


def test_the_wheel_and_the_image_hold_every_product_package() -> None:
    packages = product_packages()
    assert {"api", "client", "coordinator", "kernel"} <= packages  # the scan finds them
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    built = set(setuptools.find_packages(str(ROOT), include=find["include"]))
    assert {f"collabfl.{p}" for p in packages} <= built
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \1$", dockerfile, flags=re.MULTILINE))
    whole = "collabfl" in copied
    missing = set() if whole else {p for p in packages if f"collabfl/{p}" not in copied}
    assert not missing, f"deploy/Dockerfile copies none of {missing}"


def test_every_third_party_import_is_a_declared_dependency() -> None:
    runtime = _declared(PYPROJECT["project"]["dependencies"])
    dev = runtime | _declared(PYPROJECT["project"]["optional-dependencies"]["dev"])
    distributions = packages_distributions()
    undeclared: dict[str, set[str]] = {}
    for package in sorted(product_packages()):
        for path in (PACKAGE / package).rglob("*.py"):
            relative = path.relative_to(PACKAGE)
            declared = dev if relative in DEV_TOOLS else runtime
            for module in _runtime_imports(path):
                names = {_normal(d) for d in distributions.get(module, [module])}
                if not names & declared:
                    undeclared.setdefault(module, set()).add(str(relative))
    assert not undeclared, f"imported but not in pyproject.toml's dependencies: {undeclared}"
