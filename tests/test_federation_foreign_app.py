"""Another local user of the coordinator host submits its own app: no participant runs it.

A real TLS federation of two clients runs a collabfl run while ``nobody`` (another local
user: needs root to switch to it; CI runs as root) submits a foreign app with ``flwr run``
to the coordinator's loopback SuperLink, with an FLWR_HOME that holds only the SuperLink's
address and CA. Flower accepts the run (its Control API asks for no credential) and sends
its query to every node; each participant must refuse it before importing anything of it
(the foreign modules leave a marker file when imported) and log the refusal, and the
collabfl run must finish. Once for each client runtime.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from federation_faults import fault_config, start_run, wait_for

from collabfl.coordinator.daemon import flower_home
from collabfl.launcher.federation import LocalFederation, write_client_files
from tests.support.foreign_app import write_foreign_app

CLIENTS, ROUNDS = 2, 3
STRANGER = "nobody"
SYSTEM_PYTHON = "/usr/bin/python3"
"""The venv's interpreter may sit in a folder another user cannot enter (root's home); the
system Python of the same version runs flwr from the venv's site-packages."""


def _as_stranger(command: list[str], home: Path) -> list[str]:
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = [f"HOME={home}", f"FLWR_HOME={home / 'flwr'}", f"PYTHONPATH={site}"]
    env += ["FLWR_TELEMETRY_ENABLED=0", "FLWR_DISABLE_UPDATE_CHECK=1", "PATH=/usr/bin:/bin"]
    switch = ["setpriv", "--reuid", STRANGER, "--regid", "nogroup", "--clear-groups"]
    return [*switch, "env", "-i", *env, *command]


def _stranger_home(root: Path, coordinator_dir: Path) -> Path:
    """A folder of the stranger's own with a connection to the loopback SuperLink: its
    address, and a copy of its CA certificate (public, and readable where deployed)."""
    connection = tomllib.loads((flower_home(coordinator_dir) / "config.toml").read_text())
    link = connection["superlink"][connection["superlink"]["default"]]
    home = root / "stranger"
    (home / "flwr").mkdir(parents=True)
    shutil.copy(link["root-certificates"], home / "ca.pem")
    (home / "flwr" / "config.toml").write_text(
        f'[superlink]\ndefault = "dep"\n[superlink.dep]\naddress = "{link["address"]}"\n'
        f'root-certificates = "{home / "ca.pem"}"\n'
    )
    shutil.chown(home, STRANGER)
    for path in home.rglob("*"):
        shutil.chown(path, STRANGER)
    return home


def _wait_for_file(folder: Path, prefix: str, limit_s: float) -> Path:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = sorted(folder.glob(f"{prefix}*"))
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"nothing named {prefix}* appeared in {folder} in {limit_s} s")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder the stranger can reach (pytest's own are its owner's only)."""
    if os.geteuid() != 0:
        pytest.skip("switching to another local user (nobody) needs root")
    folder = Path(tempfile.mkdtemp(prefix="collabfl-stranger-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.mark.parametrize("runtime", ["warm", "subprocess"])
def test_a_foreign_app_from_another_local_user_runs_on_no_participant(tmp_path, outside, runtime):
    markers = outside / "markers"
    markers.mkdir()
    markers.chmod(0o777)  # where the foreign modules, whoever imports them, leave a file
    config = fault_config(tmp_path, CLIENTS, ROUNDS)
    files = write_client_files(config, tmp_path / "data")
    work = tmp_path / "work"
    with LocalFederation(work, files, runtime=runtime, tls=True) as federation:
        run_id = start_run(federation, config, tmp_path / "out", timeout=120, run_id="honest")
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        home = _stranger_home(outside, federation.coordinator_dir)
        app = write_foreign_app(home / "app", markers)
        shutil.chown(app, STRANGER)
        submit = ["-c", "from flwr.cli.app import app; app()", "run", str(app), "dep"]
        done = subprocess.run(
            _as_stranger([SYSTEM_PYTHON, *submit], home),
            capture_output=True, text=True, timeout=120, check=False, cwd=home,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr  # Flower accepts it
        answered = _wait_for_file(markers, "done-", limit_s=240)
        run = wait_for(federation, run_id, lambda r: not r.active, limit_s=300)
    assert answered.name == f"done-{CLIENTS}-{CLIENTS}", "a participant did not refuse"
    assert not list(markers.glob("client-*")), "a participant imported the foreign app"
    for k in range(CLIENTS):
        log = (work / f"client-{k}" / "executor.log").read_text()
        assert "REFUSED a task of Flower run" in log and "carries no ticket" in log, log
    assert run.status == "finished", run.message
