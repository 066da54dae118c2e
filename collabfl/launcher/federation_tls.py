"""The certificates of one ``federation up --tls`` run: a fresh CA and one per role.

``federation up --tls`` plays every party of a real deployment on one machine, so it
issues what each would hold (``collabfl.kernel.pki``): the coordinator's certificate for
its address, one operator's (the launcher's own service calls) and one member certificate
per client for that client's address, in files named ``ca.pem``,
``coordinator.pem/.key``, ``operator-<name>.pem/.key`` and ``member-<id>.pem/.key``. The CA
key stays in the folder; nothing here is reused between runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from collabfl.kernel.identity import Identity, Role
from collabfl.kernel.pki import issue, make_ca, write_certificate, write_private_key
from collabfl.kernel.tls import ClientTLS

OPERATOR = "federation-up"
"""The operator name the launcher's own service calls present."""


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class FederationCredentials:
    """Paths of a federation's TLS material, one field per role."""

    folder: Path
    ca: Path
    coordinator: KeyPair
    operator: KeyPair
    members: Mapping[int, KeyPair]

    @classmethod
    def issue(
        cls,
        folder: Path,
        coordinator_host: str,
        member_hosts: Mapping[int, str],
        days: int = 7,
    ) -> FederationCredentials:
        """A new CA in ``folder`` and a certificate for every role of the federation.

        ``coordinator_host``: the address clients dial (loopback names are added too, for
        the coordinator's own calls to itself); ``member_hosts``: each client's address.
        """
        folder.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = make_ca(days)
        write_certificate(ca_cert, folder / "ca.pem")
        write_private_key(ca_key, folder / "ca.key")

        def write(stem: str, identity: Identity, hosts: list[str]) -> KeyPair:
            key, cert = issue(identity, hosts, ca_key, ca_cert, days)
            pair = KeyPair(folder / f"{stem}.pem", folder / f"{stem}.key")
            write_certificate(cert, pair.cert)
            write_private_key(key, pair.key)
            return pair

        loopback = [h for h in ("127.0.0.1", "localhost") if h != coordinator_host]
        return cls(
            folder=folder,
            ca=folder / "ca.pem",
            coordinator=write(
                "coordinator",
                Identity(Role.COORDINATOR, coordinator_host),
                [coordinator_host, *loopback],
            ),
            operator=write(f"operator-{OPERATOR}", Identity(Role.OPERATOR, OPERATOR), []),
            members={
                k: write(f"member-{k}", Identity.member(k), [host])
                for k, host in member_hosts.items()
            },
        )

    def operator_tls(self) -> ClientTLS:
        """What the launcher presents to the coordinator service: the operator's pair."""
        return ClientTLS.from_files(self.ca, self.operator.cert, self.operator.key)
