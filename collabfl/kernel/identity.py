"""Who is calling: the federation's identities and how they are read from a certificate.

Every party holds a certificate from the federation's CA (``collabfl.kernel.pki`` issues
them). Besides the usual host name, the certificate names its holder's role in one URI
subject-alternative name, ``collabfl://<role>/<name>``:

- ``collabfl://operator/<name>``: a person who administers the federation.
- ``collabfl://coordinator/<host>``: the coordinator daemon and the ServerApp it launches.
- ``collabfl://member/<client id>``: one participant's daemon (peer server, fetcher).

A server reads the caller's identity from the TLS session (``caller_identity``), so a role
cannot be claimed, only proved by holding the matching private key.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import grpc
from cryptography import x509

from collabfl.kernel.revocation import DENIED

URI_PREFIX = "collabfl://"


class Role(StrEnum):
    OPERATOR = "operator"
    COORDINATOR = "coordinator"
    MEMBER = "member"


class UnknownIdentity(ValueError):
    """The certificate names no collabfl identity, or names it wrongly."""


@dataclass(frozen=True)
class Identity:
    role: Role
    name: str
    """The operator's name, the coordinator's host, or a member's client id as text."""

    @property
    def client_id(self) -> int | None:
        """The member's client id; None for the other roles."""
        return int(self.name) if self.role is Role.MEMBER else None

    def uri(self) -> str:
        return f"{URI_PREFIX}{self.role.value}/{self.name}"

    def __str__(self) -> str:
        return f"{self.role.value} {self.name}"

    @classmethod
    def member(cls, client_id: int) -> Identity:
        if isinstance(client_id, bool) or not isinstance(client_id, int) or client_id < 0:
            raise ValueError(f"a member's client id is a non-negative int, got {client_id!r}")
        return cls(Role.MEMBER, str(client_id))

    @classmethod
    def parse(cls, uri: str) -> Identity:
        """The identity named by a ``collabfl://role/name`` URI."""
        if not uri.startswith(URI_PREFIX):
            raise UnknownIdentity(f"{uri!r} is not a collabfl identity URI")
        role_text, _, name = uri[len(URI_PREFIX) :].partition("/")
        try:
            role = Role(role_text)
        except ValueError:
            raise UnknownIdentity(f"unknown role {role_text!r} in {uri!r}") from None
        if not name or "/" in name:
            raise UnknownIdentity(f"no name in {uri!r}")
        canonical_id = name.isdigit() and (len(name) == 1 or not name.startswith("0"))
        if role is Role.MEMBER and not canonical_id:
            raise UnknownIdentity(f"member name must be a client id, got {name!r}")
        return cls(role, name)


def identity_of_certificate(certificate: x509.Certificate) -> Identity:
    """The one collabfl identity a certificate names; anything else is refused."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        raise UnknownIdentity("certificate has no subject alternative names") from None
    uris = [
        uri
        for uri in names.value.get_values_for_type(x509.UniformResourceIdentifier)
        if uri.startswith(URI_PREFIX)
    ]
    if len(uris) != 1:
        raise UnknownIdentity(f"certificate names {len(uris)} collabfl identities, not one")
    return Identity.parse(uris[0])


def identity_of_pem(pem: bytes) -> Identity:
    return identity_of_certificate(x509.load_pem_x509_certificate(pem))


def caller_identity(context: grpc.ServicerContext) -> Identity | None:
    """The identity of a gRPC caller's verified client certificate; None without one.

    gRPC has already checked the chain against the server's client CA when this is called,
    so the certificate is genuine; a certificate without a collabfl identity, or a revoked
    one (``collabfl.kernel.revocation``), counts as none.
    """
    found = context.auth_context().get("x509_pem_cert")  # one PEM per certificate, leaf first
    if not isinstance(found, list) or not found:
        return None
    try:
        certificate = x509.load_pem_x509_certificate(found[0])
        identity = identity_of_certificate(certificate)
    except (UnknownIdentity, ValueError):
        return None
    return None if DENIED.denies(certificate) else identity
