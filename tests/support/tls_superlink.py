"""A real SuperLink started as the TLS coordinator daemon starts it (its own
``superlink_command``: SuperNode authentication, loopback TLS), without the rest of the daemon,
for tests and measurements of what its state keeps across a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from collabfl.coordinator.settings import CoordinatorSettings
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.coordinator.superlink.local_superlink import (
    key_restorer,
    superlink_command,
    superlink_control,
    supernode_registry,
    write_flower_home,
)
from collabfl.coordinator.superlink.superlink_control import ControlError
from collabfl.coordinator.superlink.supernode_restore import KeyRestorer
from collabfl.flower.processes import flower_env
from collabfl.kernel.ports import PortReservation
from collabfl.kernel.supervisor import stop_group


class TlsSuperLink:
    """The daemon's SuperLink in ``state_dir`` on a free loopback port; ``restart`` starts a
    fresh one on the same port (what the daemon's Supervisor does after a crash)."""

    def __init__(self, state_dir: Path, superlink_state: str = "memory") -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.reserved = PortReservation(1)  # until exit: restarts bind it again
        self.args = CoordinatorSettings(
            state_dir=state_dir,
            superlink_internal_port=self.reserved.ports[0],
            superlink_state=superlink_state,
        )
        self.env = {**os.environ, **flower_env(write_flower_home(self.args))}
        self.control = superlink_control(self.args)
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> TlsSuperLink:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            stop_group(self.process, grace_s=10.0)
        self.control.close()
        self.reserved.release()

    def start(self) -> None:
        with open(self.args.state_dir / "superlink.log", "ab") as log:
            self.process = subprocess.Popen(
                superlink_command(self.args), stdout=log, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )  # fmt: skip

    def restart(self) -> None:
        """SIGKILL the SuperLink (a crash) and start a new one."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.start()

    def nodes(self, timeout_s: float = 120.0) -> list[dict[str, Any]]:
        """The SuperNodes it knows, asked again while it does not answer yet."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.control.nodes()
            except ControlError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def restorer(self, state: CoordinatorState, workers: int = 4) -> KeyRestorer:
        """The daemon's key restorer for this SuperLink and ``state``."""
        restorer = key_restorer(state, supernode_registry(self.control), self.control)
        restorer.workers = workers
        return restorer
