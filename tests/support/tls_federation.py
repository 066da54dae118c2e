"""A real TLS coordinator daemon (SuperLink with SuperNode auth behind its Fleet gateway)
and client daemons beside it, on loopback, for tests of joining and refusals."""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from collabfl.coordinator.settings import PUBLIC_KEY_FILE
from collabfl.coordinator.superlink.local_superlink import flower_home
from collabfl.flower.processes import flower_binary, flower_env
from collabfl.kernel.grants import generate_private_key, save_public_key
from collabfl.kernel.ports import PortReservation
from collabfl.kernel.supervisor import stop_group
from collabfl.launcher.federation import client_command, coordinator_command
from collabfl.launcher.federation_tls import FederationCredentials, KeyPair
from tests.support.client_data import write_client_data
from tests.support.pki import TestCA

HOST = "127.0.0.1"


def _spawn(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )


class TlsCoordinator:
    """``collabfl-coordinator`` with TLS on ``HOST``; members 0-3 have certificates."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tls = FederationCredentials.issue(root / "tls", HOST, dict.fromkeys(range(4), HOST))
        self.state_dir = root / "coordinator"
        self.reserved = PortReservation(2)  # until stop: no one else takes them
        self.gateway, self.service = self.reserved.ports
        command = coordinator_command(self.state_dir, self.gateway, self.service, HOST, self.tls)
        self.process = _spawn(command, root / "coordinator.log")

    @property
    def superlink(self) -> str:
        return f"{HOST}:{self.gateway}"

    def wait_healthy(self, timeout_s: float = 120.0) -> None:
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the coordinator daemon exited"
            with contextlib.suppress(OSError):
                url = f"https://{self.superlink}/health"
                with urllib.request.urlopen(url, context=context, timeout=5) as answer:
                    if answer.status == 200 and (self.state_dir / PUBLIC_KEY_FILE).exists():
                        return
            time.sleep(0.5)
        raise TimeoutError("the coordinator never got healthy")

    def register(self, client_id: int, public_key: Path) -> None:
        """``collabfl admin register-supernode``, as the federation's operator."""
        operator = self.tls.operator
        command = [
            flower_binary("collabfl"), "admin", "--coordinator", f"{HOST}:{self.service}",
            "--ca", str(self.tls.ca), "--cert", str(operator.cert), "--key", str(operator.key),
            "register-supernode", "--client-id", str(client_id), "--key", str(public_key),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

    def online_nodes(self) -> list[int]:
        """Flower node ids the SuperLink counts as online."""
        env = {**os.environ, **flower_env(flower_home(self.state_dir))}
        done = subprocess.run(
            [flower_binary("flwr"), "supernode", "list", "collabfl", "--format", "json"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        nodes = json.loads(done.stdout).get("nodes", [])
        return [int(n["node-id"]) for n in nodes if n.get("status") == "online"]

    def client_state(self, client_id: int) -> Path:
        """The state dir ``client(client_id)`` gives its daemon (its SuperNode key lives there)."""
        return self.root / f"client-{client_id}" / "state"

    def client(self, client_id: int, *flags: str) -> ClientDaemon:
        key = self.state_dir / PUBLIC_KEY_FILE
        state = self.client_state(client_id)
        return ClientDaemon(state, self.superlink, self.tls, client_id, key, flags)

    def stop(self) -> None:
        stop_group(self.process, grace_s=15.0)
        self.reserved.release()


class ClientDaemon:
    """``collabfl-client`` for member ``client_id`` with ``tls``, dialling ``superlink``."""

    def __init__(
        self,
        state_dir: Path,
        superlink: str,
        tls: FederationCredentials,
        client_id: int,
        grant_key: Path,
        flags: tuple[str, ...] = (),
    ) -> None:
        self.state_dir = state_dir
        folder = state_dir.parent
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / "daemon.log"
        data = write_client_data(folder / "data.npz")
        self.reserved = PortReservation(2)  # until stop: no one else takes them
        peer, runtime = self.reserved.ports
        command = client_command(
            client_id, data, state_dir, superlink, peer, runtime, grant_key, host=HOST, tls=tls
        )
        self.process = _spawn([*command, *flags], self.log_path)

    @property
    def supernode_log(self) -> Path:
        return self.state_dir / "supernode.log"

    def joins(self) -> int:
        """How many times its SuperNodes have joined the SuperLink, in all."""
        with contextlib.suppress(OSError):
            return self.supernode_log.read_bytes().count(b"SuperNode ID:")
        return 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_group(self.process, grace_s=15.0)
        self.reserved.release()


class TlsStub:
    """A TLS server on loopback presenting ``cert``: it completes handshakes, answers any
    request with an empty 200 and its HTTP Date (``clock_offset_s`` off the true time),
    and serves nothing else."""

    def __init__(self, cert: Path, key: Path, clock_offset_s: float = 0.0) -> None:
        self.clock_offset_s = clock_offset_s
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.socket = socket.create_server((HOST, 0))
        self.port = self.socket.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.socket.accept()
            except OSError:  # closed
                return
            with contextlib.suppress(OSError), raw:
                raw.settimeout(5)
                with self.context.wrap_socket(raw, server_side=True) as tls:
                    tls.recv(65536)
                    date = email.utils.formatdate(time.time() + self.clock_offset_s, usegmt=True)
                    tls.sendall(
                        f"HTTP/1.1 200 OK\r\nDate: {date}\r\nContent-Length: 0\r\n\r\n".encode()
                    )

    def close(self) -> None:
        self.socket.close()


def credentials(folder: Path, *coordinator_names: str) -> FederationCredentials:
    """A CA in ``folder``, a coordinator certificate naming only ``coordinator_names`` and
    member 0's pair (for a client daemon facing a stand-in coordinator)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = TestCA()
    coordinator = KeyPair(*ca.coordinator(*coordinator_names).write(folder, "coordinator"))
    return FederationCredentials(
        folder=folder,
        ca=ca.write_ca(folder),
        coordinator=coordinator,
        operator=coordinator,  # unused here
        members={0: KeyPair(*ca.member(0).write(folder, "member-0"))},
    )


def client_daemon_against(
    folder: Path, superlink: str, tls: FederationCredentials, *flags: str
) -> ClientDaemon:
    """Client 0 dialling ``superlink``, where no coordinator is, or a stand-in."""
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / PUBLIC_KEY_FILE
    save_public_key(generate_private_key().public_key().public_bytes_raw(), key)
    return ClientDaemon(folder / "client-0" / "state", superlink, tls, 0, key, flags)
