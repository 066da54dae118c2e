"""Contract (fails loudly on a Flower upgrade): the SuperLink's in-memory state by name, and
what the daemon's key restorer (coordinator/superlink/supernode_restore.py) relies on.

``collabfl-coordinator --superlink-state memory`` (the default) gives ``flower-superlink
--database`` Flower's special name for its in-memory state; ``disk`` gives a SQLite file
(SqlLinkState and SqlObjectStore, on SQLAlchemy). That name is an internal constant; if an
upgrade renamed it, the daemon would quietly open a SQLite file of that name in its working
directory. A fresh in-memory state knows no SuperNode key, and registering a key again gives
it a new node id: the restorer registers every bound key after each SuperLink start and
records the new ids (tests/test_supernode_restore.py runs it against real SuperLinks).
"""

from __future__ import annotations

from pathlib import Path

from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.object_store.in_memory_object_store import InMemoryObjectStore
from flwr.superlink.federation import NoOpFederationManager

from collabfl.coordinator.superlink.local_superlink import IN_MEMORY_DATABASE

KEY = b"ecdsa-sha2-nistp384 AAAA-a-key"


def test_contract_the_daemon_names_flowers_in_memory_database() -> None:
    assert IN_MEMORY_DATABASE == FLWR_IN_MEMORY_DB_NAME == ":flwr-in-memory:"


def test_contract_that_name_keeps_state_and_objects_in_memory() -> None:
    objects = ObjectStoreFactory(IN_MEMORY_DATABASE)
    state = LinkStateFactory(IN_MEMORY_DATABASE, NoOpFederationManager(), objects).state()
    assert type(state) is InMemoryLinkState
    assert type(objects.store()) is InMemoryObjectStore


def test_contract_a_file_name_is_the_sqlite_state(tmp_path: Path) -> None:
    """What the daemon gives (STATE_DIR/superlink.db): the state the benchmark compares to."""
    database = str(tmp_path / "superlink.db")
    state = LinkStateFactory(database, NoOpFederationManager(), ObjectStoreFactory(database))
    assert isinstance(state.state(), SqlLinkState)
    assert Path(database).exists()


def test_contract_a_fresh_in_memory_state_knows_no_key_and_gives_a_new_id() -> None:
    def fresh() -> InMemoryLinkState:
        objects = ObjectStoreFactory(IN_MEMORY_DATABASE)
        state = LinkStateFactory(IN_MEMORY_DATABASE, NoOpFederationManager(), objects).state()
        assert isinstance(state, InMemoryLinkState)
        return state

    before = fresh()
    first = before.create_node("owner", "owner", KEY, 10.0)
    assert before.get_node_id_by_public_key(KEY) == first
    after = fresh()  # what a restarted SuperLink holds
    assert after.get_node_id_by_public_key(KEY) is None
    assert after.create_node("owner", "owner", KEY, 10.0) not in (first, 0)
