"""A throwaway CA for tests: certificates for any collabfl identity, as PEM bytes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from collabfl.kernel.identity import Identity, Role
from collabfl.kernel.pki import issue, make_ca, write_certificate, write_private_key


@dataclass(frozen=True)
class Credential:
    cert: bytes
    key: bytes

    def write(self, folder: Path, stem: str) -> tuple[Path, Path]:
        """Write to ``<stem>.pem`` / ``<stem>.key`` in ``folder``; returns both paths."""
        cert_path, key_path = folder / f"{stem}.pem", folder / f"{stem}.key"
        cert_path.write_bytes(self.cert)
        key_path.write_bytes(self.key)
        key_path.chmod(0o600)
        return cert_path, key_path


class TestCA:
    """One CA per test session or test: issues credentials for roles and hosts."""

    __test__ = False  # not a test class despite the name

    def __init__(self) -> None:
        self.key, self.cert = make_ca(days=2)
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def credential(
        self, identity: Identity, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")
    ) -> Credential:
        key, cert = issue(identity, list(hosts), self.key, self.cert, days=2)
        return Credential(
            cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )

    def member(self, client_id: int, *hosts: str) -> Credential:
        return self.credential(Identity.member(client_id), hosts or ("localhost", "127.0.0.1"))

    def operator(self, name: str = "alice") -> Credential:
        return self.credential(Identity(Role.OPERATOR, name), ())

    def coordinator(self, *hosts: str) -> Credential:
        return self.credential(
            Identity(Role.COORDINATOR, "coordinator"), hosts or ("localhost", "127.0.0.1")
        )

    def write_ca(self, folder: Path) -> Path:
        write_certificate(self.cert, folder / "ca.pem")
        write_private_key(self.key, folder / "ca.key")
        return folder / "ca.pem"
