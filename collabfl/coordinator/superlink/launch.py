"""What the coordinator daemon tells each ServerApp it launches, and how the app connects.

Besides the run's options (``RunOptions``), a launch names the run, the coordinator
service's address, the file holding this launch's token, and the TLS files the ServerApp
dials the service with (the coordinator's own certificate, so the service admits it as the
coordinator). Flower hands the run config to every ClientApp too, so it carries paths
only: the token itself stays in a 0600 file in the coordinator's state directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from collabfl.coordinator.relay.substep_client import SessionFeeder
from collabfl.coordinator.service_client import CoordinatorClient
from collabfl.kernel.atomic import write_text
from collabfl.kernel.tls import ClientTLS

LAUNCH_DIR = "launch"
"""In the coordinator's state directory (0700): one token file per run."""


@dataclass(frozen=True)
class Launch:
    """The run-config entries of one launch (keys: the field names with ``-`` for ``_``)."""

    run_id: str = ""
    coordinator: str = ""
    """Address of the coordinator service."""
    launch_token_file: str = ""
    coordinator_ca: str = ""
    """The federation's CA; empty: the service runs without TLS."""
    coordinator_cert: str = ""
    coordinator_key: str = ""
    run_ticket: str = ""
    """The coordinator-signed ticket each ClientApp checks before it serves the run."""
    node_bindings: str = ""
    """Registered Flower node id <-> client id pairs (``flower.binding``)."""
    enrolled_sizes_file: str = ""
    """A 0600 file of the training samples declared at enrolment (client id -> count):
    a path, so that members never see each other's sizes in the run config."""

    def to_run_config(self) -> dict[str, str]:
        return {name.replace("_", "-"): value for name, value in asdict(self).items()}

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> Launch:
        return cls(**{
            f.name: str(run_config.get(f.name.replace("_", "-"), "")) for f in fields(cls)
        })  # fmt: skip

    def client(self, timeout_s: float) -> CoordinatorClient:
        """A client of the service carrying this launch's token (TLS when the launch says so)."""
        return CoordinatorClient(self.coordinator, timeout_s, self._tls(), self._token())

    def feeder(self) -> SessionFeeder:
        """The ServerApp's side of the sub-step relay, on the same address and credentials."""
        return SessionFeeder(self.coordinator, self.run_id, self._token(), self._tls())

    def enrolled_sizes(self) -> dict[int, int]:
        """The sizes declared at enrolment (``admin invite --samples``); none without a file."""
        if not self.enrolled_sizes_file:
            return {}
        sizes = json.loads(Path(self.enrolled_sizes_file).read_text())
        return {int(client): int(samples) for client, samples in sizes.items()}

    def _token(self) -> str:
        return Path(self.launch_token_file).read_text().strip() if self.launch_token_file else ""

    def _tls(self) -> ClientTLS | None:
        if not self.coordinator_ca:
            return None
        return ClientTLS.from_files(
            Path(self.coordinator_ca), Path(self.coordinator_cert), Path(self.coordinator_key)
        )


def write_launch_token(state_dir: Path, run_id: str, token: str) -> Path:
    """Keep ``token`` where only the coordinator's user (and so its ServerApp) can read it."""
    folder = state_dir / LAUNCH_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / f"{run_id}.token"
    write_text(path, token)
    return path.resolve()


def write_enrolled_sizes(state_dir: Path, run_id: str, sizes: Mapping[int, int]) -> Path:
    """Keep the sizes declared at enrolment for ``run_id``'s ServerApp (0600, like its token)."""
    path = state_dir / LAUNCH_DIR / f"{run_id}.sizes.json"
    write_text(path, json.dumps({str(k): v for k, v in sorted(sizes.items())}))
    return path.resolve()


def remove_old_run_configs(state_dir: Path) -> list[Path]:
    """Delete the ``<run>.run-config.toml`` files left by releases that submitted runs with
    ``flwr run -c``: each holds its launch's run ticket, and nothing reads them any more
    (runs start through the Control API). Returns the files removed."""
    removed = sorted((state_dir / LAUNCH_DIR).glob("*.run-config.toml"))
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def flower_run_file(state_dir: Path, run_id: str) -> Path:
    """Where the launcher keeps the Flower run of ``run_id``'s latest launch
    (``flower_runs.flower_run_record``): per run, so that runs sharing a run directory
    (``federation up --methods a,b``) never read each other's."""
    return state_dir / LAUNCH_DIR / f"{run_id}.flower-run.json"


def launch_app_config() -> str:
    """The launch keys as TOML lines for the ``[tool.flwr.app.config]`` table of the app."""
    entries = Launch().to_run_config()
    return "\n".join(f"{key} = {json.dumps(value)}" for key, value in entries.items())
