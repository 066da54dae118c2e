"""The coordinator's SQLite file: one connection for every store in it, and the ordered
migrations that bring a file of any earlier version to this one.

The stores (coordinator/store/state.py: runs, rounds, events, SuperNode keys; coordinator/
enrolment_store.py: join tokens, enrolments) share one ``Database``, so one lock serialises
their writers and one ``PRAGMA user_version`` says what the file holds. A migration is
appended to ``MIGRATIONS``, never edited: file version N has had the first N applied.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from collabfl.coordinator.store.records import EVENT_LEVELS, RUN_STATUSES


class SchemaMismatch(RuntimeError):
    """The file was written by a collabfl whose schema this one cannot read."""


class CorruptDatabase(RuntimeError):
    """The SQLite file is damaged or not a database; the message says what to do."""


_STATE_TABLES = f"""
CREATE TABLE IF NOT EXISTS members (
    client_id INTEGER PRIMARY KEY,
    flower_node_id TEXT NOT NULL,  -- a uint64, which SQLite's signed INTEGER cannot hold
    peer_address TEXT NOT NULL,
    num_samples INTEGER NOT NULL,
    registered_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    method TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN {RUN_STATUSES}),
    last_completed_round INTEGER,
    message TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    round INTEGER NOT NULL,
    num_clients INTEGER NOT NULL,
    recorded_at REAL NOT NULL,
    has_coalitions INTEGER NOT NULL DEFAULT 0,  -- 1: coalitions were recorded (maybe none)
    PRIMARY KEY (run_id, round)
);
CREATE TABLE IF NOT EXISTS edges (
    run_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    i INTEGER NOT NULL,
    j INTEGER NOT NULL,
    weight REAL NOT NULL,
    PRIMARY KEY (run_id, round, i, j),
    FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    client_id INTEGER NOT NULL,
    metrics_json TEXT NOT NULL,
    PRIMARY KEY (run_id, round, client_id),
    FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS coalitions (
    run_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    client_id INTEGER NOT NULL,  -- a client is in at most one coalition per round
    coalition INTEGER NOT NULL,  -- index in the round's list, ordered by first member
    PRIMARY KEY (run_id, round, client_id),
    FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT REFERENCES runs (run_id),  -- NULL: federation-wide
    round INTEGER,
    level TEXT NOT NULL CHECK (level IN {EVENT_LEVELS}),
    kind TEXT NOT NULL,
    client_id INTEGER,
    message TEXT NOT NULL,
    time REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_run ON events (run_id, event_id);
CREATE TABLE IF NOT EXISTS launches (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    token_sha256 TEXT NOT NULL,  -- of the latest launch's token; older tokens are stale
    launched_at REAL NOT NULL
);
"""

_SUPERNODE_TABLE = """
CREATE TABLE IF NOT EXISTS supernode_keys (  -- registered SuperNode keys (TLS federations)
    client_id INTEGER PRIMARY KEY,
    flower_node_id TEXT NOT NULL UNIQUE,  -- a uint64, the id Flower gave the key
    public_key TEXT NOT NULL,  -- OpenSSH form, as registered
    registered_at REAL NOT NULL
);
"""

_RUN_ENDS_TABLE = """
CREATE TABLE IF NOT EXISTS run_ends (  -- a run's latest end: its older tickets die with it
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    status TEXT NOT NULL,
    ended_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS run_ends_by_time ON run_ends (ended_at);
"""


_ENROLMENT_TABLES = """
CREATE TABLE IF NOT EXISTS join_tokens (
    token_id TEXT PRIMARY KEY,
    secret_sha256 TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('member', 'operator')),
    subject TEXT NOT NULL,  -- a member's client id, or an operator's name
    hosts_json TEXT NOT NULL,  -- the names its certificate will carry
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    used_at REAL,
    samples INTEGER  -- the training samples the operator vouches for (NULL: none)
);
CREATE TABLE IF NOT EXISTS enrolments (
    role TEXT NOT NULL,
    subject TEXT NOT NULL,
    host TEXT NOT NULL,
    cert_serial TEXT NOT NULL,  -- hex
    cert_not_after REAL NOT NULL,
    enrolled_at REAL NOT NULL,
    revoked_at REAL,
    samples INTEGER,
    PRIMARY KEY (role, subject)
);
CREATE TABLE IF NOT EXISTS revoked_serials (
    cert_serial TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    subject TEXT NOT NULL,
    revoked_at REAL NOT NULL
);
"""


def _current_layout(conn: sqlite3.Connection) -> None:
    """Version 1: every table of both stores. A file from before ``user_version`` was used
    (its own ``schema_version`` table, 1 or 2; enrolment tables without ``samples``) is
    brought to the same layout; each step checks first, so one cut short completes on the
    next open."""
    legacy = _legacy_version(conn)
    if legacy is not None and legacy not in (1, 2):
        raise SchemaMismatch(f"schema version {legacy}; this collabfl reads version 2 or later")
    conn.executescript(_STATE_TABLES + _SUPERNODE_TABLE + _RUN_ENDS_TABLE + _ENROLMENT_TABLES)
    _add_missing_column(conn, "rounds", "has_coalitions INTEGER NOT NULL DEFAULT 0")
    for table in ("join_tokens", "enrolments"):
        _add_missing_column(conn, table, "samples INTEGER")
    conn.execute("DROP TABLE IF EXISTS schema_version")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_current_layout]
"""The file's version is how many of these it has had, in order."""


def _legacy_version(conn: sqlite3.Connection) -> int | None:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return None
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return None if row is None else int(row[0])


def _add_missing_column(conn: sqlite3.Connection, table: str, column: str) -> None:
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    if column.split()[0] not in columns:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


class Database:
    """The SQLite file at ``path`` (created if missing), checked and migrated when opened.

    ``transaction()`` is one atomic, committed unit of work; concurrent callers wait for the
    lock. WAL mode lets readers in other processes proceed while a round is written."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.connection = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self.connection.row_factory = sqlite3.Row
        try:
            self._check_integrity()
            self.connection.execute("PRAGMA foreign_keys = ON")
            self.connection.execute("PRAGMA journal_mode = WAL")
            self._migrate()
        except sqlite3.DatabaseError as error:
            self.connection.close()
            raise self._corrupt(str(error)) from None
        except BaseException:
            self.connection.close()
            raise

    @property
    def version(self) -> int:
        return int(self.connection.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self.version
        if version > len(MIGRATIONS):
            raise SchemaMismatch(
                f"{self.path} has schema version {version}, written by a newer collabfl; "
                f"this one reads up to version {len(MIGRATIONS)}"
            )
        for number, migration in enumerate(MIGRATIONS[version:], start=version + 1):
            with self.connection:
                migration(self.connection)
                self.connection.execute(f"PRAGMA user_version = {number}")

    def _check_integrity(self) -> None:
        """Refuse a damaged file at open, rather than failing every later request."""
        problems = [row[0] for row in self.connection.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise self._corrupt("; ".join(problems[:3]))

    def _corrupt(self, reason: str) -> CorruptDatabase:
        return CorruptDatabase(
            f"coordinator database {self.path} is damaged ({reason}); restore it from a "
            "backup, or move it away to start with an empty one"
        )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.lock, self.connection:
            yield self.connection

    def close(self) -> None:
        with self.lock:
            self.connection.close()
