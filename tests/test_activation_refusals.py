"""Refused SuperNode activations become rationed ``impostor`` events
(coordinator/gateway/activation_refusals.py); the real refusals are in
tests/test_fleet_gateway.py."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.proto.fleet_pb2 import ActivateNodeRequest

from collabfl.coordinator.gateway.activation_refusals import ActivationRefusals, key_fingerprint
from collabfl.coordinator.store.state import CoordinatorState


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP384R1())


def _activation(key: ec.EllipticCurvePrivateKey) -> bytes:
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return ActivateNodeRequest(public_key=pem).SerializeToString()


def _openssh(key: ec.EllipticCurvePrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def test_the_member_whose_registered_key_was_shown_is_named(tmp_path):
    member = _key()
    with CoordinatorState(tmp_path / "c.db") as state:
        state.bind_supernode(3, 77, _openssh(member))
        ActivationRefusals(state).record(_activation(member), 409, "could not be activated")
        (event,) = state.events()
    assert (event.kind, event.client_id, event.run_id) == ("impostor", 3, "")
    assert "client 3's registered key" in event.message and "(409)" in event.message


def test_refusals_are_rationed_per_key_and_in_all(tmp_path):
    with CoordinatorState(tmp_path / "c.db") as state:
        refusals = ActivationRefusals(state, per_key_s=60.0, max_per_minute=3)
        same = _activation(_key())
        for _ in range(5):
            refusals.record(same, 401, "Invalid SuperNode authentication")
        assert len(state.events()) == 1
        for _ in range(5):
            refusals.record(_activation(_key()), 401, "Invalid SuperNode authentication")
        events = state.events()
    assert len(events) == 3
    assert "more refusals not recorded" in events[1].message
    assert all(e.client_id is None for e in events)


def test_junk_is_recorded_as_carrying_no_key(tmp_path):
    with CoordinatorState(tmp_path / "c.db") as state:
        ActivationRefusals(state).record(b"\xff\xff junk", 422, "x" * 10_000)
        (event,) = state.events()
    assert "no readable key" in event.message and len(event.message) < 400
    assert key_fingerprint(b"not a key") is None


def test_a_member_refused_while_its_key_is_registered_again_is_no_impostor(tmp_path):
    """After a restart of an in-memory SuperLink a member's own SuperNode is refused until
    its key is back (coordinator/superlink/supernode_restore.py): not a copied key."""
    member = _key()
    with CoordinatorState(tmp_path / "c.db") as state:
        state.bind_supernode(3, 77, _openssh(member))
        refusals = ActivationRefusals(state, keys_ready=lambda: False)
        refusals.record(_activation(member), 412, "No SuperNode found with the given public key")
        (event,) = state.events()
    assert (event.kind, event.level, event.client_id) == ("key_not_back", "info", 3)
    assert "does not have back yet" in event.message and "copied" not in event.message
