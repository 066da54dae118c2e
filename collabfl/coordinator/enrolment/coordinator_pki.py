"""The coordinator's own TLS material, made on its first start.

A coordinator started without ``--ssl-*`` files keeps a federation CA in
``<state-dir>/pki`` (folder 0700, keys 0600): ``ca.pem``/``ca.key``, its own certificate
for the names participants dial (``--name``, plus loopback for its own calls), and a local
operator credential (``operator.json``) so that ``collabfl admin`` on this machine needs no
files from anywhere. Participants and further operators get their certificates by joining
with a token (coordinator/enrolment/enrolment.py); the CA key never leaves this folder.

An organisation that brings its own CA passes ``--ssl-ca-certfile``/``--ssl-certfile``/
``--ssl-keyfile`` and, to let the coordinator enrol members, ``--ca-keyfile``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from collabfl.kernel.identity import Identity, Role, identity_of_certificate
from collabfl.kernel.netprobe import certificate_names
from collabfl.kernel.pki import issue, load_ca_files, make_ca, write_certificate, write_private_key

LOCAL_OPERATOR = "local"
"""The operator name of the credential the coordinator makes for its own machine."""
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
CA_DAYS, CERT_DAYS = 3650, 365


class CannotIssue(Exception):
    """This coordinator holds no CA key (or runs without TLS): it enrols nobody."""


@dataclass(frozen=True)
class CoordinatorTLSFiles:
    """Where the coordinator's TLS files are; ``ca_key`` None: it cannot enrol anyone."""

    ca: Path
    cert: Path
    key: Path
    ca_key: Path | None

    def signing_ca(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        if self.ca_key is None:
            raise CannotIssue(
                "this coordinator holds no CA key, so it cannot enrol anyone: start it with "
                "--ca-keyfile, or issue certificates with your own CA"
            )
        return load_ca_files(self.ca_key, self.ca)


def ensure_pki(folder: Path, names: list[str]) -> CoordinatorTLSFiles:
    """The CA and coordinator certificate in ``folder``, made when missing.

    The coordinator's certificate is issued again when it does not name every one of
    ``names`` (the operator added a name), from the same CA.
    """
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    files = CoordinatorTLSFiles(
        folder / "ca.pem", folder / "coordinator.pem", folder / "coordinator.key", folder / "ca.key"
    )
    if not (files.ca.exists() and files.ca_key is not None and files.ca_key.exists()):
        ca_key, ca_cert = make_ca(CA_DAYS)
        write_private_key(ca_key, folder / "ca.key")
        write_certificate(ca_cert, files.ca)
    ca_key, ca_cert = files.signing_ca()
    hosts = list(dict.fromkeys([*names, *LOOPBACK_NAMES]))
    if not (files.cert.exists() and _names(files.cert) >= set(hosts)):
        key, cert = issue(Identity(Role.COORDINATOR, hosts[0]), hosts, ca_key, ca_cert, CERT_DAYS)
        write_private_key(key, files.key)
        write_certificate(cert, files.cert)
    return files


def _names(cert_path: Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    identity_of_certificate(cert)  # a file that is not ours is issued again
    return set(certificate_names(cert))
