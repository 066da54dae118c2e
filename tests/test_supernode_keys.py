"""SuperNode keys: made once per client daemon (private, stable), bound to client ids."""

from __future__ import annotations

import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from collabfl.coordinator.store.state import CoordinatorState, InvalidRecord
from collabfl.flower.supernode_key import ensure_supernode_key

BIG_NODE_ID = 2**64 - 5


def test_supernode_key_is_private_stable_and_a_nist_curve(tmp_path):
    private_path, public_path = ensure_supernode_key(tmp_path)
    assert stat.S_IMODE(private_path.stat().st_mode) == 0o600
    first = public_path.read_bytes()
    assert ensure_supernode_key(tmp_path)[1].read_bytes() == first  # a restart keeps it
    key = serialization.load_ssh_public_key(first)
    assert isinstance(key, ec.EllipticCurvePublicKey)


def test_bindings_survive_a_reopen_and_a_new_key_replaces_the_old(tmp_path):
    db = tmp_path / "coordinator.db"
    with CoordinatorState(db) as state:
        state.bind_supernode(0, BIG_NODE_ID, "ecdsa-sha2-nistp384 AAAA first")
        state.bind_supernode(1, 7, "ecdsa-sha2-nistp384 AAAA second")
        state.bind_supernode(0, 9, "ecdsa-sha2-nistp384 AAAA rotated")
    with CoordinatorState(db) as state:
        assert state.supernode_bindings() == {9: 0, 7: 1}


def test_one_flower_node_cannot_be_two_clients(tmp_path):
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        state.bind_supernode(0, 7, "key")
        with pytest.raises(InvalidRecord, match="already client 0"):
            state.bind_supernode(1, 7, "key")
        with pytest.raises(InvalidRecord, match="uint64"):
            state.bind_supernode(1, 2**64, "key")
