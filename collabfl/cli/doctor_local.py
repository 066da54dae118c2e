"""What a bare `collabfl doctor` checks: this machine, before anyone names an address.

An operator setting up a machine runs `collabfl doctor` first; given nothing, it used to
check nothing. These checks need no argument: the Python and the packages a federation runs
on (torch, Flower, gRPC, protobuf) at the versions collabfl declares, whether torch sees
CUDA, a daemon's state folder where one is kept (`$COLLABFL_STATE_DIR`, else the documented
`/var/lib/collabfl` and `/var/lib/collabfl-client` when they exist; `cli/doctor.py` checks
those as `--state-dir` does), and that runs can be written here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement  # matplotlib's dependency, always installed
from packaging.version import InvalidVersion, Version

from collabfl.cli.doctor import Check, Inputs, Result, checks, from_state_dir, state_dir_writable

STATE_ENV = "COLLABFL_STATE_DIR"
DEFAULT_STATE_DIRS = (Path("/var/lib/collabfl"), Path("/var/lib/collabfl-client"))
"""Where docs/deployment.md keeps the coordinator's and a participant's state."""
PACKAGES = ("torch", "flwr", "grpcio", "protobuf")
"""What a federation's processes run on; the rest of collabfl's dependencies only draw."""
RUNS_DIR = Path("runs")
"""Where `compare`, `simulate` and `federation up` write a run without --out."""
PYTHON = (3, 11)


def python_version(found: tuple[int, ...] = tuple(sys.version_info[:3])) -> Result:
    """collabfl needs Python 3.11 or later (pyproject's requires-python)."""
    text = ".".join(map(str, found))
    if found[:2] >= PYTHON:
        return Result(True, f"Python {text}")
    return Result(False, f"Python {text} is older than 3.11", "use Python 3.11 or later")


def declared() -> dict[str, Requirement]:
    """collabfl's declared requirements of PACKAGES (its installed metadata)."""
    wanted: dict[str, Requirement] = {}
    for line in metadata.requires("collabfl") or []:
        requirement = Requirement(line)
        if requirement.name in PACKAGES and requirement.marker is None:
            wanted[requirement.name] = requirement
    return wanted


def package_version(name: str, installed: str | None, requirement: Requirement | None) -> Result:
    """Whether ``name`` is installed at a version ``requirement`` allows."""
    allowed = str(requirement.specifier) if requirement is not None else ""
    fix = f"pip install '{name}{allowed}' (requirements.txt pins what the tests ran on)"
    if installed is None:
        return Result(False, f"{name} is not installed", fix)
    try:
        fits = requirement is None or requirement.specifier.contains(
            Version(installed), prereleases=True
        )
    except InvalidVersion:
        fits = False
    if fits:
        needs = f" (collabfl needs {allowed})" if allowed else ""
        return Result(True, f"{name} {installed}{needs}")
    return Result(False, f"{name} {installed}, but collabfl needs {allowed}", fix)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cuda() -> Result:
    """Whether torch sees a CUDA device; a CPU build is fine (clients train on the CPU)."""
    import torch

    built = torch.version.cuda
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        return Result(True, f"CUDA {built}: {count} device(s), {torch.cuda.get_device_name(0)}")
    if built is None:
        return Result(True, "CUDA: none (torch is a CPU build; clients train on the CPU)")
    return Result(
        True,
        f"CUDA: torch is built for CUDA {built} but sees no device",
        "check the driver with `nvidia-smi`, and CUDA_VISIBLE_DEVICES",
        warning=True,
    )


def runs_writable(path: Path = RUNS_DIR) -> Result:
    """Whether a run started here without --out can write its folder."""
    found = state_dir_writable(path)
    line = found.line.replace(f"state dir {path}", f"run folder {path.resolve()}", 1)
    fix = "run from a folder you may write, or give --out" if found.fix else ""
    return Result(found.ok, line, fix)


def state_dirs(
    environ: Mapping[str, str] = os.environ, defaults: Sequence[Path] = DEFAULT_STATE_DIRS
) -> list[Path]:
    """The daemons' state folders to check: ``$COLLABFL_STATE_DIR``, else the defaults
    that exist on this machine."""
    if environ.get(STATE_ENV):
        return [Path(environ[STATE_ENV])]
    return [path for path in defaults if path.is_dir()]


def local_checks() -> list[Check]:
    """This machine's software, CUDA and run folder, in that order."""
    wanted = declared()
    versions: list[Check] = [
        partial(package_version, name, _installed(name), wanted.get(name)) for name in PACKAGES
    ]
    return [python_version, *versions, cuda, runs_writable]


def bare_checks() -> list[Check]:
    """Everything a bare `collabfl doctor` checks: this machine, then each state folder
    found as `--state-dir` would (ValueError when its saved settings do not parse)."""
    found = local_checks()
    for folder in state_dirs():
        found += checks(from_state_dir(folder, Inputs(state_dir=folder)))
    return found
