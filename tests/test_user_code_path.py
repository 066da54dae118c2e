"""User code is found on the Python path, and only there: the commands and the processes
they start never import from their working directory (kernel/python_command.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from collabfl.coordinator.superlink.local_superlink import superlink_program
from collabfl.flower.processes import warm_executor_command
from collabfl.flower.quick_reply_supernode import supernode_program
from collabfl.flower.serverapp_template import template_command
from collabfl.kernel.user_code import UserCodeError, check_findable, load_object
from collabfl.launcher.federation import client_command, coordinator_command

ROOT = Path(__file__).resolve().parents[1]

PLANTED = """\
import pathlib
pathlib.Path(__file__).with_name("planted-ran").write_text("ran")
raise SystemExit(99)
"""

SOMEWHERE = Path("/nonexistent")
COMMANDS = {  # as `federation up` and the daemons build them
    "client daemon": client_command(0, SOMEWHERE, SOMEWHERE, "127.0.0.1:1", 2, 3, SOMEWHERE),
    "coordinator daemon": coordinator_command(SOMEWHERE, 1, 2),
    "warm executor": warm_executor_command("127.0.0.1:1"),
    "SuperNode": supernode_program(),
    "SuperLink": superlink_program(),
    "ServerApp template": template_command([]),
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_process_started_in_a_folder_another_user_writes_ignores_its_modules(tmp_path, command):
    # Another local user left argparse.py in the folder the operator starts a daemon from
    # (/tmp, a shared project folder): each process the daemons start must not run it.
    (tmp_path / "argparse.py").write_text(PLANTED)
    done = subprocess.run(
        [*command, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert not (tmp_path / "planted-ran").exists(), done.stderr
    assert done.returncode == 0, done.stderr


def test_every_module_process_is_started_through_module_command():
    # A new `python -m` command line written by hand would bring the working directory back.
    by_hand = re.compile(r"sys\.executable,\s*\"-m\"")
    found = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "collabfl").rglob("*.py")
        if by_hand.search(path.read_text())
    ]
    assert found == []


def test_a_module_missing_from_the_python_path_is_named_with_the_fix(tmp_path, monkeypatch):
    (tmp_path / "lab_here").mkdir()
    (tmp_path / "lab_here" / "__init__.py").write_text("def factory(k):\n    return k\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    with pytest.raises(
        UserCodeError, match=r"no module named 'lab_here' on the Python path.*PYTHONPATH"
    ):
        load_object("lab_here:factory")
    with pytest.raises(UserCodeError, match="PYTHONPATH"):
        check_findable(["lab_here:factory"])
    monkeypatch.syspath_prepend(str(tmp_path))
    check_findable(["lab_here:factory"])
    assert load_object("lab_here:factory")(3) == 3


def test_a_dependency_missing_inside_user_code_keeps_its_own_name(tmp_path, monkeypatch):
    (tmp_path / "lab_needs").mkdir()
    (tmp_path / "lab_needs" / "__init__.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserCodeError, match="No module named 'no_such_dependency'"):
        load_object("lab_needs:factory")


def test_finding_user_code_imports_none_of_it(tmp_path, monkeypatch):
    (tmp_path / "lab_loud").mkdir()
    (tmp_path / "lab_loud" / "__init__.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    check_findable(["lab_loud.models:net"])
    assert "lab_loud" not in sys.modules
    assert not (tmp_path / "lab_loud" / "planted-ran").exists()
