"""Contract (fails loudly on a Flower upgrade): the SuperLink's in-memory state by name.

benchmarks/coordinator_cpu.py ``--superlink-state memory`` measures the SuperLink on Flower's
in-memory state by giving ``flower-superlink --database`` Flower's special name for it, where
the coordinator daemon gives a SQLite file (SqlLinkState and SqlObjectStore, on SQLAlchemy).
That name is an internal constant; if an upgrade renames it, the benchmark's ``memory`` side
would quietly open a SQLite file of that name and measure the disk state twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.object_store.in_memory_object_store import InMemoryObjectStore
from flwr.superlink.federation import NoOpFederationManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from coordinator_cpu import IN_MEMORY_DATABASE


def test_contract_the_benchmark_names_flowers_in_memory_database() -> None:
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
