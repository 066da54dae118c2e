"""Another local user of the coordinator host: no foreign app runs, no token is in sight.

A real TLS federation of two clients runs a collabfl run while ``nobody`` (another local
user: needs root to switch to it; CI runs as root) submits a foreign app with ``flwr run``
to the coordinator's loopback SuperLink, with an FLWR_HOME that holds only the SuperLink's
address and CA: the SuperLink answers it 403 (coordinator/superlink/owner_gated_superlink.py). The
same submission from the coordinator's own user is accepted by Flower (its Control API asks for no
credential), but the coordinator starts ServerApps only for the runs it submitted: the
foreign ServerApp never starts (its modules would leave a marker file when imported), so no
participant is asked anything, and the coordinator logs the refusal. Meanwhile no process
of the federation shows a Flower task token on its command line, and a task claim without
the SuperExec secret is refused by the SuperLink and by every SuperNode.

It runs the subprocess client runtime: there Flower starts a ClientApp process per message,
whose command line is where a task token would show; the warm runtime's executor command
takes no token at all (flower/processes.py), and the foreign app never reaches a client in
either runtime (the refusal is the coordinator's and the SuperLink's).
"""

from __future__ import annotations

import itertools
import os
import re
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

from collabfl.coordinator.settings import CoordinatorSettings
from collabfl.coordinator.superlink.local_superlink import flower_home, loopback_tls
from collabfl.launcher.federation import LocalFederation, write_client_files
from tests.support.foreign_app import write_foreign_app
from tests.support.task_claims import claim_task

pytestmark = pytest.mark.federation

CLIENTS, ROUNDS = 2, 3
STRANGER = "nobody"
SYSTEM_PYTHON = "/usr/bin/python3"
"""The venv's interpreter may sit in a folder another user cannot enter (root's home); the
system Python of the same version runs flwr from the venv's site-packages."""


def _with_home(command: list[str], home: Path) -> list[str]:
    """``command`` with only ``home``'s Flower connection and the venv's Flower."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = [f"HOME={home}", f"FLWR_HOME={home / 'flwr'}", f"PYTHONPATH={site}"]
    env += ["FLWR_TELEMETRY_ENABLED=0", "FLWR_DISABLE_UPDATE_CHECK=1", "PATH=/usr/bin:/bin"]
    return ["env", "-i", *env, *command]


def _as_stranger(command: list[str], home: Path) -> list[str]:
    switch = ["setpriv", "--reuid", STRANGER, "--regid", "nogroup", "--clear-groups"]
    return [*switch, *_with_home(command, home)]


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


def _wait_for_line(log: Path, text: str, limit_s: float) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = [line for line in log.read_text().splitlines() if text in line]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"{log} never said {text!r} in {limit_s} s")


TOKEN = re.compile(r"[0-9a-f]{32,}")


def _command_lines(work: Path) -> list[list[str]]:
    """The command lines of the federation's processes in ``work``: those whose environment
    names it (every daemon's child inherits its owner variable, which holds its state dir)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(work).encode() not in (proc / "environ").read_bytes():
                continue
            found.append((proc / "cmdline").read_bytes().decode(errors="replace").split("\0"))
        except OSError:
            continue
    return found


def _shows_token(argv: list[str]) -> bool:
    return any(f == "--token" and TOKEN.fullmatch(v) for f, v in itertools.pairwise(argv))


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder the stranger can reach (pytest's own are its owner's only)."""
    if os.geteuid() != 0:
        pytest.skip("switching to another local user (nobody) needs root")
    folder = Path(tempfile.mkdtemp(prefix="collabfl-stranger-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_foreign_app_from_another_local_user_runs_nowhere(tmp_path, outside):
    markers = outside / "markers"
    markers.mkdir()
    markers.chmod(0o777)  # where the foreign modules, whoever imports them, leave a file
    config = fault_config(tmp_path, CLIENTS, ROUNDS)
    files = write_client_files(config, tmp_path / "data")
    work = tmp_path / "work"
    with LocalFederation(work, files, runtime="subprocess", tls=True) as federation:
        run_id = start_run(federation, config, tmp_path / "out", timeout=120, run_id="honest")
        wait_for(federation, run_id, lambda r: (r.last_completed_round or -1) >= 0)
        argvs = _command_lines(work)
        coordinator_log = work / "logs" / "coordinator.log"
        link = _wait_for_line(coordinator_log, "SuperLink on", 10).rsplit(" ", 1)[-1]
        ca = loopback_tls_ca(federation.coordinator_dir)
        claims = [claim_task(link, ca)]
        claims += [claim_task(f"127.0.0.1:{port}") for port in federation.runtime_ports]
        home = _stranger_home(outside, federation.coordinator_dir)
        app = write_foreign_app(home / "app", markers)
        shutil.chown(app, STRANGER)
        submit = ["-c", "from flwr.cli.app import app; app()", "run", str(app), "dep"]
        stranger = subprocess.run(
            _as_stranger([SYSTEM_PYTHON, *submit], home),
            capture_output=True, text=True, timeout=120, check=False, cwd=home,
        )  # fmt: skip
        assert stranger.returncode != 0  # the SuperLink answers the coordinator's user only
        assert "403" in stranger.stdout + stranger.stderr, stranger
        # A run the coordinator did not submit, from its own user (what the stranger's was
        # before coordinator/superlink/owner_gated_superlink.py): Flower accepts it, nothing runs
        # it.
        done = subprocess.run(
            _with_home([SYSTEM_PYTHON, *submit], home),
            capture_output=True, text=True, timeout=120, check=False, cwd=home,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr  # Flower accepts it
        refusal = _wait_for_line(coordinator_log, "REFUSED the ServerApp of Flower run", 240)
        stopped = _wait_for_line(coordinator_log, "stopped foreign Flower run", 120)
        run = wait_for(federation, run_id, lambda r: not r.active, limit_s=300)
    # The run's ServerApp is forked from the ServerApp template (one argv for both): its
    # flags, token file included, never reach a command line.
    serverapps = [argv for argv in argvs if any("serverapp_template" in a for a in argv)]
    assert len(serverapps) >= 2, argvs
    assert not [argv for argv in serverapps if any(a.startswith("--token") for a in argv)]
    assert not [argv for argv in argvs if _shows_token(argv)]
    assert all("401 Unauthorized" in claim for claim in claims), claims
    assert "the coordinator did not submit it" in refusal
    foreign_id = refusal.split("Flower run ", 1)[1].split(":", 1)[0]
    assert stopped.rstrip().endswith(f"Flower run {foreign_id}"), stopped  # not left pending
    assert not list(markers.glob("*")), "the foreign app was imported somewhere"
    assert run.status == "finished", run.message


def loopback_tls_ca(coordinator_dir: Path) -> bytes:
    """The CA the coordinator's loopback SuperLink presents (its runtime API's TLS)."""
    tls = loopback_tls(CoordinatorSettings(state_dir=coordinator_dir))
    assert tls is not None
    return tls.ca.read_bytes()
