"""Running a command as another local user (``nobody``), as an attacker on the same host."""

from __future__ import annotations

import os

import pytest

STRANGER_UID = 65534
"""``nobody`` on Debian and most Linux systems."""
SYSTEM_PYTHON = "/usr/bin/python3"
"""An interpreter the stranger may run (the venv's may sit in a folder it cannot enter)."""


def as_stranger(command: list[str]) -> list[str]:
    """``command`` run as uid 65534 with no groups and an empty environment; skips the test
    where this process cannot switch users."""
    if os.geteuid() != 0:
        pytest.skip("switching to another local user needs root")
    switch = ["setpriv", f"--reuid={STRANGER_UID}", f"--regid={STRANGER_UID}", "--clear-groups"]
    return [*switch, "env", "-i", "PATH=/usr/bin:/bin", *command]
