"""install.py, the README's installer: the CPU torch build where no NVIDIA driver is (PyPI's
Linux wheel is a CUDA build of several GB), pip's own choice elsewhere and as the fallback.
Checked with pip replaced by a recorder: no install runs here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("install", ROOT / "install.py")
assert _spec is not None and _spec.loader is not None
install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install)


@pytest.fixture
def calls(monkeypatch):
    made: list[list[str]] = []
    monkeypatch.setattr(install, "pip", lambda args: made.append(args) or 0)
    monkeypatch.setattr(install, "installed", lambda version: False)
    return made


def _machine(monkeypatch, tmp_path, *, platform="linux", driver=False, smi=False):
    monkeypatch.setattr(install.sys, "platform", platform)
    driver_file = tmp_path / "nvidia-version"
    if driver:
        driver_file.write_text("NVRM version: 570\n")
    monkeypatch.setattr(install, "NVIDIA_DRIVER", driver_file)
    monkeypatch.setattr(install.shutil, "which", lambda name: "/usr/bin/x" if smi else None)


def test_a_cpu_only_linux_machine_gets_torch_from_the_cpu_index_first(monkeypatch, tmp_path, calls):
    _machine(monkeypatch, tmp_path)
    assert install.main(["-q", "-r", str(ROOT / "requirements.txt")]) == 0
    pinned = re.search(r"^torch==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)[1]
    assert calls[0][:3] == ["install", "-q", f"torch=={pinned}"]
    assert calls[0][3:] == install.FROM_CPU_INDEX
    assert install.CPU_INDEX in calls[0]
    assert calls[1] == ["install", "-q", "-r", str(ROOT / "requirements.txt")]


@pytest.mark.parametrize(
    "machine", [{"driver": True}, {"smi": True}, {"platform": "darwin"}, {"platform": "win32"}]
)
def test_elsewhere_it_is_plain_pip(monkeypatch, tmp_path, calls, machine):
    _machine(monkeypatch, tmp_path, **machine)
    install.main(["-q", "-r", str(ROOT / "requirements-dev.txt")])
    assert calls == [["install", "-q", "-r", str(ROOT / "requirements-dev.txt")]]


def test_an_unreachable_cpu_index_leaves_the_choice_to_pip_and_says_so(
    monkeypatch, tmp_path, capsys
):
    _machine(monkeypatch, tmp_path)
    made: list[list[str]] = []
    monkeypatch.setattr(
        install, "pip", lambda args: made.append(args) or (1 if len(made) == 1 else 0)
    )
    monkeypatch.setattr(install, "installed", lambda version: False)
    assert install.main(["-r", str(ROOT / "requirements.txt")]) == 0
    assert len(made) == 2 and "pip's own index decides" in capsys.readouterr().out


def test_an_installed_pin_or_no_pin_asks_no_index(monkeypatch, tmp_path, calls):
    _machine(monkeypatch, tmp_path)
    monkeypatch.setattr(install, "installed", lambda version: True)
    install.main(["-r", str(ROOT / "requirements.txt")])
    (tmp_path / "reqs.txt").write_text("numpy\n")
    install.main([f"--requirement={tmp_path / 'reqs.txt'}"])
    assert [call[0] for call in calls] == ["install", "install"]
    assert all(install.CPU_INDEX not in call for call in calls)


def test_the_pin_is_read_from_every_spelling_of_a_requirements_file(tmp_path):
    (tmp_path / "r.txt").write_text("# torch==1.0 in a comment\nnumpy\ntorch == 2.13.0  # pin\n")
    for args in (["-r", "r.txt"], ["-rr.txt"], ["--requirement=r.txt"], ["--requirement", "r.txt"]):
        files = install.requirement_files(
            [a.replace("r.txt", str(tmp_path / "r.txt")) for a in args]
        )
        assert install.torch_pin(files) == "2.13.0"


def test_the_readme_and_ci_install_through_it():
    readme = (ROOT / "README.md").read_text()
    first, second = re.search(r"```bash\n(.+)\n(.+)\n```", readme).groups()
    assert ".venv/bin/python install.py -q -r requirements.txt &&" in first
    assert ".venv/bin/python install.py -q -r requirements-dev.txt &&" in second
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert first in ci and second in ci
