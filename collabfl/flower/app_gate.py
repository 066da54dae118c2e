"""Which Flower tasks a participant serves: collabfl's only, with the ClientApp it installed.

Flower's executors install the FAB a task names and import the ClientApp it declares, so
whoever can submit a run to the SuperLink (its Control API asks for no credential) would run
code on every participant. A participant here never installs or imports FAB content: a task
is served by ``collabfl.apps.client_app:app`` from the installed collabfl, and only once
its run carries a run ticket the coordinator signed (kernel/tickets.py) and its FAB declares
collabfl's app (``COLLABFL_APP``). Both checks read only data: the run config, and the FAB's
``pyproject.toml`` parsed from its zip. Anything else is refused before any of it is
imported, with an error line in the executor's log.
"""

from __future__ import annotations

import importlib
import io
import logging
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.clientapp import ClientApp

from collabfl.kernel.grants import load_public_key_bytes
from collabfl.kernel.tickets import InvalidTicket, TicketVerifier, load_run_ends

log = logging.getLogger(__name__)

CLIENT_APP = "collabfl.apps.client_app:app"
COLLABFL_APP = {
    "name": "collabfl-federation",
    "publisher": "collabfl",
    "serverapp": "collabfl.apps.server_app:app",
    "clientapp": CLIENT_APP,
}
"""What the coordinator's FAB declares (coordinator/daemon.py ``write_app``)."""
MAX_PYPROJECT_BYTES = 1 << 20
"""Far above a real app's pyproject.toml: a FAB is not unpacked beyond this."""


class RefusedTask(Exception):
    """The task is not a collabfl run launched by this participant's coordinator."""


def verify_ticket(node_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> str:
    """The collabfl run id of a run whose ticket the coordinator signed and whose run has
    not ended since (node config ``ended-runs``: the file the client daemon keeps from the
    coordinator's list); InvalidTicket (saying which check failed) otherwise."""
    key = str(node_config.get("coordinator-key", ""))
    if not key:
        raise InvalidTicket("node config lacks coordinator-key: no ticket can be checked")
    run_id = str(run_config.get("run-id", ""))
    verifier = TicketVerifier(load_public_key_bytes(Path(key)))
    ended_file = str(node_config.get("ended-runs", ""))
    ended = load_run_ends(Path(ended_file)) if ended_file else {}
    verifier.verify(str(run_config.get("run-ticket", "")), run=run_id, ended=ended)
    return run_id


def declared_app(fab: bytes) -> dict[str, str]:
    """The app a FAB declares (name, publisher, components), read from its pyproject.toml
    without unpacking or importing anything else; ValueError when it declares none."""
    try:
        with zipfile.ZipFile(io.BytesIO(fab)) as archive:
            info = archive.getinfo("pyproject.toml")
            if info.file_size > MAX_PYPROJECT_BYTES:
                raise ValueError(f"pyproject.toml of {info.file_size} bytes")
            project = tomllib.loads(archive.read(info).decode())
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"the FAB declares no readable app: {error}") from None
    app = project.get("tool", {}).get("flwr", {}).get("app", {})
    components = app.get("components", {})
    return {
        "name": str(project.get("project", {}).get("name", "")),
        "publisher": str(app.get("publisher", "")),
        "serverapp": str(components.get("serverapp", "")),
        "clientapp": str(components.get("clientapp", "")),
    }


def check_task(
    node_config: Mapping[str, Any], run_config: Mapping[str, Any], fab: bytes, flower_run: int
) -> None:
    """Refuse (RefusedTask, logged) a task that is not of a ticketed collabfl run."""
    try:
        verify_ticket(node_config, run_config)
        declared = declared_app(fab)
    except (InvalidTicket, ValueError) as error:
        reason = str(error)
    else:
        wrong = {k: v for k, v in declared.items() if v != COLLABFL_APP[k]}
        if not wrong:
            return
        reason = f"the FAB is not collabfl's app: it declares {wrong}"
    log.error(
        "REFUSED a task of Flower run %s: %s; nothing of it was installed or imported",
        flower_run, reason,
    )  # fmt: skip
    raise RefusedTask(f"this participant serves only collabfl runs: {reason}")


def installed_client_app() -> ClientApp:
    """The ClientApp of the installed collabfl (never one from a FAB)."""
    module, _, attribute = CLIENT_APP.partition(":")
    app = getattr(importlib.import_module(module), attribute)
    if not isinstance(app, ClientApp):
        raise TypeError(f"{CLIENT_APP} is a {type(app).__name__}, not a ClientApp")
    return app
