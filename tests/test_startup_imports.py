"""What starting a process imports: on a machine shared by a coordinator and its clients,
every CPU-second of imports delays the SuperNodes' joining and the executors' readiness.

The coordinator daemon does not import torch at start (nor for a run request); a
warm executor's ClientApp does not load the SuperLink's state code."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_coordinator_daemon_does_not_import_torch():
    probe = "import sys, collabfl.coordinator.daemon; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False", done.stderr


def test_importing_the_client_app_does_not_import_the_superlink_state():
    """The ClientApp reaches the reply pull through the sub-step seat; the SuperLink's state
    code it would drag in cost every executor 0.7 s of start-up."""
    probe = (
        "import sys, collabfl.apps.client_app; "
        "print('flwr.server.superlink.linkstate' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False", done.stderr
