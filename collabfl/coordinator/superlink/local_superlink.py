"""The coordinator's SuperLink: its command, its Control API and the ``flwr`` connection to it.

The SuperLink listens on loopback only (``LOOPBACK``), for the coordinator's own user alone
where the platform tells who calls (coordinator/superlink/owner_gated_superlink.py); other hosts
reach it only through the Fleet gateway. It starts no ServerApp itself: the coordinator's
ServerAppLauncher claims its tasks, signed with the state dir's SuperExec secret. With TLS
it requires SuperNode authentication, and each of its starts gets the bound SuperNode keys
again (coordinator/superlink/supernode_restore.py).
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path

import tomli_w

from collabfl.coordinator.enrolment.enrolment import SuperNodeRegistry
from collabfl.coordinator.gateway.fleet_gateway import LoopbackTLS
from collabfl.coordinator.settings import CoordinatorSettings
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.coordinator.superlink.superlink_control import ControlError, SuperLinkControl
from collabfl.coordinator.superlink.supernode_restore import KeyRestorer
from collabfl.flower.processes import flower_binary
from collabfl.flower.superexec_auth import ensure_secret, rotate_secret
from collabfl.kernel.atomic import write_text
from collabfl.kernel.python_command import module_command
from collabfl.kernel.socket_owner import owner_lookup_available
from collabfl.kernel.supervisor import RestartPolicy

log = logging.getLogger("collabfl.coordinator")

LOOPBACK = "127.0.0.1"
CONNECTION = "collabfl"
"""The name of the ``flwr`` connection to this coordinator's SuperLink (``write_flower_home``)."""
SUPERLINK_RESTARTS = RestartPolicy(max_restarts=5, backoff_max_s=30.0)
"""The SuperLink is restarted 5 times in a row at most (about a minute), then the daemon
exits 1. Unlike a client's SuperNode, which waits on things other people fix (its key's
registration, the coordinator's address), the SuperLink runs on this machine, on loopback,
from our own files: one that fails six times in a row fails for a local reason waiting will
not cure (its port taken, its database corrupt, the disk full). Exiting says so to what
runs the daemon (systemd, compose), which restarts or alerts, and to the operator, with the
reason in the log's last line."""
IN_MEMORY_DATABASE = ":flwr-in-memory:"
"""The ``--database`` that makes flower-superlink keep its state and objects in Python dicts,
no SQLAlchemy (Flower's FLWR_IN_MEMORY_DB_NAME; tests/test_flower_contract_linkstate.py pins
it)."""
CONTROL_API_OPEN = "control_api_open"
"""The federation-wide event of a start whose SuperLink answers every local user."""


def flower_home(state_dir: Path) -> Path:
    """FLWR_HOME naming the coordinator's SuperLink: for the admin commands on this machine
    (``local_superlink_control``) and an operator's ``flwr ls``/``flwr log``; the daemon's
    own calls need no ``flwr`` process."""
    return (state_dir / "flwr").resolve()


def loopback_tls(settings: CoordinatorSettings) -> LoopbackTLS | None:
    """TLS of the SuperLink behind the gateway; None in insecure mode."""
    if settings.insecure:
        return None
    return LoopbackTLS.ensure(settings.state_dir / "superlink_tls")


def superlink_command(settings: CoordinatorSettings) -> list[str]:
    """The SuperLink on loopback: reachable from other hosts only through the gateway. It
    starts no ServerApp itself: the coordinator's ServerAppLauncher claims its tasks, signed
    with the state dir's SuperExec secret."""
    database = IN_MEMORY_DATABASE
    if settings.superlink_state == "disk":
        database = str((settings.state_dir / "superlink.db").resolve())
    command = [
        *superlink_program(),
        "--database",
        database,
        "--disable-runtime-dependency-installation",
        "--isolation",
        "process",
        "--superexec-auth-secret-file",
        str(ensure_secret(settings.state_dir).resolve()),
        "--host",
        LOOPBACK,
        "--port",
        str(settings.superlink_internal_port),
    ]
    tls = loopback_tls(settings)
    if tls is None:
        return [*command, "--insecure"]
    return [
        *command,
        "--ssl-ca-certfile",
        str(tls.ca),
        "--ssl-certfile",
        str(tls.cert),
        "--ssl-keyfile",
        str(tls.key),
        "--enable-supernode-auth",
    ]


def superlink_program() -> list[str]:
    """Flower's SuperLink, gated on this user where the kernel names the owners of loopback
    connections (coordinator/superlink/owner_gated_superlink.py); Flower's own program elsewhere."""
    if owner_lookup_available():
        return module_command("collabfl.coordinator.superlink.owner_gated_superlink")
    return [flower_binary("flower-superlink")]


def report_control_api_access(state: CoordinatorState, port: int) -> None:
    """Say at start who can use the SuperLink's loopback port: only this user, or (where
    the platform cannot tell who calls) every local user, as a warning and an event."""
    if owner_lookup_available():
        log.info(
            "the SuperLink's loopback port %s:%s answers only this user's processes (uid %s)",
            LOOPBACK, port, os.geteuid(),
        )  # fmt: skip
        return
    message = (
        f"the SuperLink's Control API on {LOOPBACK}:{port} answers every local user of this "
        "host (list, submit and stop runs): this platform does not tell who opens a loopback "
        "connection (no /proc/net/tcp) and Flower has no Control API authentication; keep "
        "other users off this host or close the port to them with a firewall owner rule"
    )
    log.warning("%s", message)
    state.record_event("", CONTROL_API_OPEN, message, "warning")


def superlink_starting(state_dir: Path, restorer: KeyRestorer | None) -> None:
    """Before each SuperLink start: a new SuperExec secret (claims signed for the previous
    SuperLink cannot be replayed to this one, which may not know their nonces), and the
    bound SuperNode keys once it answers."""
    if restorer is not None:
        restorer.started()
    rotate_secret(state_dir)


def superlink_control(settings: CoordinatorSettings) -> SuperLinkControl:
    """The Control API of this coordinator's SuperLink, called from this process."""
    tls = loopback_tls(settings)
    address = f"{LOOPBACK}:{settings.superlink_internal_port}"
    return SuperLinkControl(address, None if tls is None else tls.ca)


def local_superlink_control(state_dir: Path) -> SuperLinkControl:
    """The Control API of the SuperLink of the daemon whose state dir is ``state_dir`` (on
    this machine), found from the connection the daemon writes for ``flwr``; ValueError
    when the daemon has not written it (not started yet) or it cannot be read."""
    path = flower_home(state_dir) / "config.toml"
    try:
        connection = tomllib.loads(path.read_text())["superlink"][CONNECTION]
        address, ca = connection["address"], connection.get("root-certificates")
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: no SuperLink connection ({type(error).__name__}: {error}); has the "
            "coordinator daemon started with this --state-dir?"
        ) from None
    return SuperLinkControl(str(address), None if ca is None else Path(ca))


def supernode_registry(control: SuperLinkControl) -> SuperNodeRegistry:
    """Registers SuperNode keys with this coordinator's SuperLink, and removes them."""

    def unregister(node_id: int) -> None:
        try:
            control.unregister(node_id)
        except ControlError as error:  # already gone: what revocation wants
            log.info("SuperNode %s not unregistered: %s", node_id, error)

    return SuperNodeRegistry(control.register, unregister)


def key_restorer(
    state: CoordinatorState, registry: SuperNodeRegistry, control: SuperLinkControl
) -> KeyRestorer:
    """Gives each SuperLink start the bound SuperNode keys it does not know (TLS only)."""

    def known_nodes() -> list[int]:
        return [int(n["node-id"]) for n in control.nodes() if n["status"] != "unregistered"]

    return KeyRestorer(
        state, known_nodes, registry.register, registry.unregister, control.node_holding
    )


def write_flower_home(settings: CoordinatorSettings) -> Path:
    """FLWR_HOME with one connection to our SuperLink on loopback (``flower_home``)."""
    home = flower_home(settings.state_dir)
    home.mkdir(parents=True, exist_ok=True)
    address = f"{LOOPBACK}:{settings.superlink_internal_port}"
    connection: dict[str, str | bool] = {"address": address}
    tls = loopback_tls(settings)
    if tls is None:
        connection["insecure"] = True
    else:
        connection["root-certificates"] = str(tls.ca.resolve())
    config = {"superlink": {"default": CONNECTION, CONNECTION: connection}}
    write_text(home / "config.toml", tomli_w.dumps(config))  # quoted for TOML: any path passes
    return home
