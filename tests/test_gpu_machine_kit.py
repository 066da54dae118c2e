"""benchmarks/gpu_machine/: the one-pass run for a lent GPU machine, and its wheels.

A GPU machine is lent for minutes; a step of run.sh that names a missing script or a flag its
script no longer takes would spend them on an error. These tests catch that here.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "benchmarks" / "gpu_machine"
sys.path.insert(0, str(KIT))
import wheels  # noqa: E402


def steps() -> list[list[str]]:
    """Each ``step`` line of run.sh as its command's words (continuations joined)."""
    text = (KIT / "run.sh").read_text().replace("\\\n", " ")
    found = [
        shlex.split(line.strip())[3:]
        for line in text.splitlines()
        if line.strip().startswith("step ")
    ]
    return [words for words in found if words]


def test_run_sh_is_valid_bash():
    subprocess.run(["bash", "-n", str(KIT / "run.sh")], check=True)


@pytest.mark.parametrize("words", steps(), ids=lambda words: Path(words[1]).stem)
def test_each_step_names_a_script_and_flags_it_takes(words):
    assert words[0] == "python3", words
    if words[1] == "-m":
        assert words[2] == "pytest" and (ROOT / words[-1]).is_file(), words
        return
    script = ROOT / words[1]
    assert script.is_file(), script
    usage = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in (word for word in words[2:] if word.startswith("--")):
        assert re.search(rf"{re.escape(flag)}\b", usage), f"{script.name} takes no {flag}"


def test_the_wheels_cover_pyproject_less_what_the_image_holds():
    wanted = {wheels.project_name(spec) for spec in wheels.requirements()}
    assert {"flwr", "pydantic", "cryptography", "blake3", "cvxpy", "pytest-timeout"} <= wanted
    assert not wanted & wheels.IMAGE_HAS  # torch, numpy, ... come from the image


def test_wheel_file_names_give_their_projects():
    assert wheels.project_name("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl") == (
        "pydantic-core"
    )
    assert wheels.project_name("tomli_w-1.2.0-py3-none-any.whl") == "tomli-w"
    assert wheels.project_name("flwr>=1.41,<1.43") == "flwr"
