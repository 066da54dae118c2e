"""TLS material for the peer link, as gRPC credentials.

Peers talk over TLS in a real deployment; with a client CA on the server side the link is
mutual (the server also authenticates the fetching daemon). The material is PEM bytes so it
can come from files, a secret store, or a test that generates it on the fly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class ServerTLS:
    """A peer server's certificate chain and key; ``client_ca`` set means mutual TLS."""

    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None

    @classmethod
    def from_files(
        cls, cert_chain: Path, private_key: Path, client_ca: Path | None = None
    ) -> ServerTLS:
        return cls(
            cert_chain.read_bytes(),
            private_key.read_bytes(),
            client_ca.read_bytes() if client_ca is not None else None,
        )

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


@dataclass(frozen=True)
class ClientTLS:
    """The CA that signs peer certificates, plus this daemon's own pair for mutual TLS."""

    root_cert: bytes
    cert_chain: bytes | None = None
    private_key: bytes | None = None

    def __post_init__(self) -> None:
        if (self.cert_chain is None) != (self.private_key is None):
            raise ValueError("a client certificate needs its private key and vice versa")

    @classmethod
    def from_files(
        cls, root_cert: Path, cert_chain: Path | None = None, private_key: Path | None = None
    ) -> ClientTLS:
        return cls(
            root_cert.read_bytes(),
            cert_chain.read_bytes() if cert_chain is not None else None,
            private_key.read_bytes() if private_key is not None else None,
        )

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_cert,
            private_key=self.private_key,
            certificate_chain=self.cert_chain,
        )
