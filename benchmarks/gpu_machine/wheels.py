"""Wheels for a GPU machine that cannot reach a package index.

The lent H200 machine (CONTRIBUTING.md, "On a lent GPU machine") has Python 3.12, torch with
CUDA and the scientific stack, but not Flower and several of collabfl's other dependencies,
and nothing can be downloaded there. This downloads, here, every runtime dependency that
pyproject.toml declares and the test tools, with their own dependencies, as wheels for
CPython 3.12 on manylinux x86_64, then removes the wheels that image already holds
(``IMAGE_HAS``) so that the folder, with the checkout, stays under the 64 MiB a call
carries. A wheel of collabfl itself is added for its console scripts. ``run.sh`` installs
the folder with ``pip --no-index --no-deps --target``.

    python benchmarks/gpu_machine/wheels.py [--into .whl]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = (
    "manylinux_2_35_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
TEST_TOOLS = ("pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5")
IMAGE_HAS = frozenset(
    {
        # The lent image's own builds (its torch is the CUDA one), read from its package list.
        "torch",
        "numpy",
        "scipy",
        "pandas",
        "matplotlib",
        "contourpy",
        "fonttools",
        "kiwisolver",
        "pillow",
        "pygments",
        "uvloop",
    }
)
"""Left out: the image holds them, and they are the large wheels."""
UNUSED = frozenset({"uv", "scs", "sparsediffpy"})
"""Left out though the image lacks them: Flower's runtime installer (collabfl turns it off),
and solvers cvxpy imports only when asked for them (collabfl asks for Clarabel and OSQP)."""
WHEEL_NAME = re.compile(r"^([A-Za-z0-9_.]+?)-\d")


def requirements() -> list[str]:
    """pyproject.toml's runtime dependencies the image lacks, and the test tools."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *TEST_TOOLS]
    return [spec for spec in wanted if project_name(spec) not in IMAGE_HAS]


def project_name(spec_or_wheel: str) -> str:
    """The normalised project name of a requirement or a wheel's file name."""
    match = WHEEL_NAME.match(spec_or_wheel) or re.match(r"^([A-Za-z0-9_.-]+)", spec_or_wheel)
    assert match is not None, spec_or_wheel
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def fetch(into: Path, python: str) -> None:
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    pip = [sys.executable, "-m", "pip"]
    wanted = ["--python-version", python, "--implementation", "cp", *platforms]
    download = [*pip, "download", "-q", "--only-binary=:all:", *wanted, "-d", str(into)]
    subprocess.run([*download, *requirements()], check=True)
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(into), str(ROOT)], check=True)


def prune(into: Path) -> list[str]:
    """Remove the wheels the image holds or nothing uses; the names removed."""
    removed = []
    for wheel in sorted(into.glob("*.whl")):
        if project_name(wheel.name) in IMAGE_HAS | UNUSED:
            wheel.unlink()
            removed.append(wheel.name)
    return removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--into", type=Path, default=ROOT / ".whl")
    parser.add_argument("--python", default="3.12", help="the machine's Python (3.12 there)")
    args = parser.parse_args()
    if args.into.exists():
        shutil.rmtree(args.into)
    args.into.mkdir(parents=True)
    fetch(args.into, args.python)
    removed = prune(args.into)
    wheels = sorted(args.into.glob("*.whl"))
    size = sum(wheel.stat().st_size for wheel in wheels)
    print(f"{len(wheels)} wheels, {size / 2**20:.1f} MiB in {args.into}")
    print(f"left out: {', '.join(removed) or 'none'}")


if __name__ == "__main__":
    main()
