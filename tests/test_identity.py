"""Identities are read from certificates, never taken from what a caller says."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from collabfl.kernel.identity import Identity, Role, UnknownIdentity, identity_of_pem
from collabfl.kernel.pki import issue, make_ca
from tests.support.pki import TestCA


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
