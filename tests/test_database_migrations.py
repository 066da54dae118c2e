"""coordinator.db: one file, one connection for its two stores, one ordered list of
migrations (``PRAGMA user_version``). Files written before that list existed (their own
``schema_version`` table, enrolment tables without ``samples``) open, keep their records and
take new ones; a file from a newer collabfl, or an unknown old version, is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from collabfl.coordinator.store.database import MIGRATIONS, Database, SchemaMismatch
from collabfl.coordinator.store.enrolment_store import EnrolmentStore, JoinToken
from collabfl.coordinator.store.state import CoordinatorState

EDGES = [(0, 1, 0.5), (1, 0, 0.25)]
METRICS = {0: {"test_acc": 0.8}, 1: {"test_acc": 0.6}}


def _token(subject: str, samples: int | None = None) -> JoinToken:
    return JoinToken(f"t{subject}", "member", subject, ("lab",), 1.0, 2e9, None, samples)


def _tokens(store: EnrolmentStore) -> dict[str, JoinToken]:
    return {token.token_id: token for token in store.tokens()}


def _as_before_user_version(db: Path, legacy_version: int) -> None:
    """Turn a current file back into the layout collabfl wrote before ``user_version``: a
    ``schema_version`` table (1: also no coalitions), enrolment tables without samples."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("PRAGMA user_version = 0")
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (?)", (legacy_version,))
        for table in ("join_tokens", "enrolments"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN samples")
        if legacy_version == 1:
            conn.execute("DROP TABLE coalitions")
            conn.execute("ALTER TABLE rounds DROP COLUMN has_coalitions")
    conn.close()


def test_both_stores_share_the_daemons_one_connection(tmp_path):
    database = Database(tmp_path / "coordinator.db")
    state, store = CoordinatorState(database), EnrolmentStore(database)
    assert state.database is store.database is database
    store.add_token(_token("1"), "ab" * 32)
    state.create_run("r", "dpfl", {})
    state.close()  # a shared file is its opener's to close: both still work
    store.close()
    assert state.run("r").run_id == "r" and "t1" in _tokens(store)
    database.close()


@pytest.mark.parametrize("legacy_version", [1, 2])
def test_a_file_from_before_user_version_is_migrated_in_place(tmp_path, legacy_version):
    db = tmp_path / "coordinator.db"
    with CoordinatorState(db) as state:
        state.create_run("r", "dpfl", {})
        state.record_round("r", 0, EDGES, METRICS, 2)
    store = EnrolmentStore(db)
    store.add_token(_token("1"), "ab" * 32)
    store.close()
    _as_before_user_version(db, legacy_version)

    with CoordinatorState(db) as state:
        assert state.round("r", 0).edges == sorted(EDGES)
        state.record_round("r", 1, [], METRICS, 2, coalitions=[[0, 1]])
        assert state.coalitions("r") == {1: [[0, 1]]}
    store = EnrolmentStore(db)
    try:
        assert "t1" in _tokens(store)
        store.add_token(_token("2", samples=300), "cd" * 32)
        assert _tokens(store)["t2"].samples == 300
    finally:
        store.close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "schema_version" not in tables  # one version record, not two
    finally:
        conn.close()


def test_an_unknown_old_version_is_refused_and_left_as_it_was(tmp_path):
    db = tmp_path / "coordinator.db"
    CoordinatorState(db).close()
    _as_before_user_version(db, 2)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE schema_version SET version = 99")
    conn.close()
    with pytest.raises(SchemaMismatch, match="schema version 99"):
        CoordinatorState(db)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(99,)]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    finally:
        conn.close()
