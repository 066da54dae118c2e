"""Identities are read from certificates, never taken from what a caller says."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from collabfl.kernel.identity import Identity, Role, UnknownIdentity, identity_of_pem
from collabfl.kernel.pki import fingerprint, issue, make_ca
from tests.support.pki import TestCA

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def test_each_role_round_trips_through_a_certificate():
    ca = TestCA()
    assert identity_of_pem(ca.member(3).cert) == Identity(Role.MEMBER, "3")
    assert identity_of_pem(ca.member(3).cert).client_id == 3
    assert identity_of_pem(ca.operator("bob").cert) == Identity(Role.OPERATOR, "bob")
    coordinator = identity_of_pem(ca.coordinator().cert)
    assert coordinator.role is Role.COORDINATOR and coordinator.client_id is None


@pytest.mark.parametrize(
    "uri",
    [
        "https://member/1",
        "collabfl://admin/x",
        "collabfl://member/",
        "collabfl://member/01",
        "collabfl://member/-1",
        "collabfl://member/1/2",
        "collabfl://member/one",
    ],
)
def test_malformed_identity_uris_are_refused(uri):
    with pytest.raises(UnknownIdentity):
        Identity.parse(uri)


def test_a_certificate_without_an_identity_names_none():
    _, cert = make_ca(days=1)  # a CA certificate has no subject alternative names at all
    with pytest.raises(UnknownIdentity):
        identity_of_pem(cert.public_bytes(serialization.Encoding.PEM))


def test_a_certificate_naming_two_identities_is_refused():
    ca = TestCA()
    _, cert = issue(Identity.member(1), ["h"], ca.key, ca.cert)
    builder_names = [
        x509.DNSName("h"),
        x509.UniformResourceIdentifier(Identity.member(1).uri()),
        x509.UniformResourceIdentifier(Identity(Role.OPERATOR, "x").uri()),
    ]
    now = datetime.datetime.now(datetime.UTC)
    double = (
        x509.CertificateBuilder()
        .subject_name(cert.subject)
        .issuer_name(ca.cert.subject)
        .public_key(cert.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(builder_names), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    with pytest.raises(UnknownIdentity, match="2 collabfl identities"):
        identity_of_pem(double.public_bytes(serialization.Encoding.PEM))


def test_make_tls_issues_every_role_and_reuses_its_ca(tmp_path):
    def make(*args: str) -> None:
        subprocess.run(
            [sys.executable, str(DEPLOY / "make_tls.py"), "--out", str(tmp_path), *args],
            check=True, capture_output=True,
        )  # fmt: skip

    make("--coordinator", "coord.lab", "--operator", "alice", "--member", "0=lab-a")
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    for stem in ("coordinator", "operator-alice", "member-0"):
        x509.load_pem_x509_certificate(
            (tmp_path / f"{stem}.pem").read_bytes()
        ).verify_directly_issued_by(ca)
        assert (tmp_path / f"{stem}.key").stat().st_mode & 0o777 == 0o600
    assert identity_of_pem((tmp_path / "member-0.pem").read_bytes()) == Identity.member(0)
    first = fingerprint((tmp_path / "member-0.pem").read_bytes())
    make("--member", "0=lab-a")  # a fresh certificate for a compromised member, same CA
    assert x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes()) == ca
    assert fingerprint((tmp_path / "member-0.pem").read_bytes()) != first


def test_make_tls_rejects_a_malformed_member(tmp_path):
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "make_tls.py"), "--out", str(tmp_path), "--member", "lab-a"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2 and "ID=HOST" in result.stderr
