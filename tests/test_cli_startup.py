"""The command line starts without torch (seconds of import on a small machine): ``collabfl
--help``, ``--version`` and every ``admin`` command. benchmarks/cli_startup.py times it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from collabfl import __version__

HEAVY = ("torch", "matplotlib", "networkx", "cvxpy")


def test_the_cli_module_imports_no_torch():
    probe = (
        "import sys, collabfl.coordinator.cli; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = _python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("collabfl.coordinator.cli", "collabfl"),
        ("collabfl.coordinator.daemon", "collabfl-coordinator"),
        ("collabfl.client.daemon", "collabfl-client"),
    ],
)
def test_version_names_the_package_version(module, name):
    entry = f"import sys; sys.argv[0] = {name!r}; from {module} import main; sys.exit(main())"
    done = _python("-c", entry, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{name} {__version__}"


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
