"""A restarted in-memory SuperLink gets the bound SuperNode keys back (coordinator/
supernode_restore.py): every key still bound in coordinator.db is registered again, its new
node id replaces the old one in the binding and the member's row, a revoked key is not
registered, and a key Flower refuses becomes an event, not a crash, unless the operator
registered it meanwhile."""

from __future__ import annotations

import pytest

from collabfl.coordinator.store.state import CoordinatorState, Member
from collabfl.coordinator.superlink.supernode_restore import KeyRestorer
from collabfl.flower.supernode_key import ensure_supernode_key
from tests.support.tls_superlink import TlsSuperLink

pytestmark = pytest.mark.federation

BAD_KEY = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQ= not-a-point"


def test_a_restarted_superlink_gets_the_bound_keys_back_with_new_node_ids(tmp_path):
    state = CoordinatorState(tmp_path / "coordinator.db")
    with TlsSuperLink(tmp_path / "coordinator") as superlink:
        assert superlink.nodes() == []
        restorer = superlink.restorer(state)
        registry_register = restorer.register
        keys = {}
        for client in range(3):
            _, public = ensure_supernode_key(tmp_path / f"client-{client}")
            keys[client] = public.read_text().strip()
            state.bind_supernode(client, registry_register(keys[client]), keys[client])
        old = {client: node for client, node, _ in state.bound_supernodes()}
        state.register_members(Member(c, old[c], f"127.0.0.1:{7000 + c}", 10) for c in old)
        restorer.unregister(old[2])  # client 2 revoked, as Enroller.revoke does it
        state.unbind_supernode(2)
        state.bind_supernode(3, 12345, BAD_KEY)  # a key Flower will not take

        superlink.restart()
        assert superlink.nodes() == [], "a fresh in-memory SuperLink knows no key"
        assert restorer.restore()

        new = {client: node for client, node, _ in state.bound_supernodes()}
        assert set(new) == {0, 1, 3}
        assert new[0] != old[0] and new[1] != old[1]
        assert new[3] == 12345, "a key that failed keeps its binding for the operator to see"
        assert sorted(int(n["node-id"]) for n in superlink.nodes()) == sorted([new[0], new[1]])
        members = {m.client_id: m.flower_node_id for m in state.members()}
        assert members == {0: new[0], 1: new[1], 2: old[2]}
        assert state.supernode_bindings() == {new[0]: 0, new[1]: 1, 12345: 3}
        lost = [e for e in state.events("") if e.kind == "supernode_key_lost"]
        assert [e.client_id for e in lost] == [3]

        assert restorer.restore(), "a second pass finds nothing to do"
        assert {c: n for c, n, _ in state.bound_supernodes()} == new
    state.close()


def test_a_key_replaced_meanwhile_is_not_rebound(tmp_path):
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        state.bind_supernode(0, 1, "old key")
        state.bind_supernode(0, 2, "new key")  # re-enrolled while the old one was registered
        assert not state.rebind_supernode(0, "old key", 3)
        assert state.bound_supernodes() == [(0, 2, "new key")]
        assert state.rebind_supernode(0, "new key", 4)
        assert state.bound_supernodes() == [(0, 4, "new key")]


def test_a_key_the_operator_registered_meanwhile_is_rebound_to_its_node(tmp_path):
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        state.bind_supernode(0, 11, "key 0")
        state.bind_supernode(1, 21, "key 1")
        held = {"key 0": 12, "key 1": 22}

        def operator_was_first(public_key: str) -> int:
            # `collabfl admin register-supernode` registered the key just before the
            # restorer, which Flower then refuses as in use; for client 0 the operator's
            # command has written its binding already, for client 1 not yet
            if public_key == "key 0":
                state.bind_supernode(0, held[public_key], public_key)
            raise RuntimeError("Public key already in use. (HTTP 412)")

        restorer = KeyRestorer(state, lambda: [], operator_was_first, lambda node: None, held.get)
        assert restorer.restore()
        assert state.bound_supernodes() == [(0, 12, "key 0"), (1, 22, "key 1")]
        assert not [e for e in state.events("") if e.kind == "supernode_key_lost"]


def test_a_key_held_as_another_clients_node_is_reported_not_rebound(tmp_path):
    with CoordinatorState(tmp_path / "coordinator.db") as state:
        state.bind_supernode(0, 11, "key 0")
        state.bind_supernode(5, 55, "key 0")  # the operator registered client 0's key as 5's

        def in_use(public_key: str) -> int:
            raise RuntimeError("Public key already in use. (HTTP 412)")

        restorer = KeyRestorer(state, lambda: [55], in_use, lambda node: None, lambda key: 55)
        assert restorer.restore()
        assert state.bound_supernodes() == [(0, 11, "key 0"), (5, 55, "key 0")]
        (lost,) = [e for e in state.events("") if e.kind == "supernode_key_lost"]
        assert lost.client_id == 0 and "client 5's node 55" in lost.message
