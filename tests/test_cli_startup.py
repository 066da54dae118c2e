"""The command line starts without torch (seconds of import on a small machine): ``collabfl
--help``, ``--version`` and every ``admin`` command; so does the client daemon, which every
participant starts (and restarts). benchmarks/cli_startup.py times the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from collabfl import __version__

HEAVY = ("torch", "matplotlib", "networkx", "cvxpy")


@pytest.mark.parametrize(
    ("module", "heavy"),
    [
        # gRPC, protobuf and SQLite load in the admin command that talks to a coordinator
        # or opens its state, not for --help (about 70 ms of a 0.25 s start on an idle core).
        ("collabfl.cli.main", (*HEAVY, "grpc", "google.protobuf", "sqlite3")),
        # The client daemon serves files and supervises Flower: the warm executor beside it
        # is the one process of a participant that loads torch (and flwr, for the SuperNode).
        ("collabfl.client.daemon", (*HEAVY, "flwr", "safetensors")),
    ],
)
def test_the_module_imports_no_torch(module: str, heavy: tuple[str, ...]):
    probe = f"import sys, {module}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    done = _python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("collabfl.cli.main", "collabfl"),
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
