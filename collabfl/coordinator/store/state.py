"""The coordinator's durable records: members, runs, rounds, graphs, coalitions, events.

A restarted coordinator reopens the same file and carries on, so every change is committed
before the call returns. The record types are coordinator/store/records.py's; the file, its one
connection and its migrations are coordinator/store/database.py's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collabfl.coordinator.store.database import CorruptDatabase, Database, SchemaMismatch
from collabfl.coordinator.store.record_rules import (
    InvalidRecord,
    NotFound,
    RunConflict,
    RunNotActive,
    StaleLaunch,
    UnknownMember,
    UnknownRound,
    UnknownRun,
    check_node_id,
    check_run_id,
    checked_coalitions,
    checked_edges,
    checked_metrics,
    json_scalar,
    non_negative,
)
from collabfl.coordinator.store.records import (
    ACTIVE_STATUSES,
    END_STATUSES,
    EVENT_LEVELS,
    MAX_RUN_MESSAGE,
    RUN_STATUSES,
    Coalitions,
    Edge,
    Event,
    Member,
    RoundGraph,
    RoundRecord,
    RoundWindow,
    Run,
)
from collabfl.kernel.tickets import MAX_RUN_ENDS, RunEnd

__all__ = [
    "ACTIVE_STATUSES", "END_STATUSES", "EVENT_LEVELS", "KEEP_ENDED_RUNS", "MAX_RUN_MESSAGE",
    "RUN_STATUSES", "Coalitions", "CoordinatorState", "CorruptDatabase", "Edge", "Event",
    "InvalidRecord", "Member", "NotFound", "RoundGraph", "RoundRecord", "RoundWindow", "Run",
    "RunConflict", "RunNotActive", "SchemaMismatch", "StaleLaunch", "UnknownMember",
    "UnknownRound", "UnknownRun",
]  # fmt: skip
"""The store, and (for callers of old) the record types of records.py and errors of
record_rules.py."""

KEEP_ENDED_RUNS = 100
"""Ended runs whose rounds and events the database keeps, the latest ended first."""


class CoordinatorState:
    """All coordinator records in the SQLite file at ``db_path`` (created if missing).

    Of the runs that ended, the ``keep_ended_runs`` that ended last keep their rounds and
    events; older ones keep only their run row (config, status, last round, message): their
    records are in their run folders."""

    def __init__(
        self, database: Database | Path | str, keep_ended_runs: int = KEEP_ENDED_RUNS
    ) -> None:
        if keep_ended_runs < 0:
            raise ValueError(f"keep_ended_runs must be >= 0, got {keep_ended_runs}")
        self.keep_ended_runs = keep_ended_runs
        self._owns_database = not isinstance(database, Database)
        self.database = database if isinstance(database, Database) else Database(database)
        self.path = self.database.path
        self._lock = self.database.lock
        self._conn = self.database.connection

    def close(self) -> None:
        """Close the file, if this store opened it (a shared ``Database`` is its opener's)."""
        if self._owns_database:
            self.database.close()

    def __enter__(self) -> CoordinatorState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic, committed unit of work; concurrent callers wait for the lock."""
        with self.database.transaction() as conn:
            yield conn

    # Members

    def register_members(self, members: Iterable[Member]) -> list[Member]:
        """Insert or update members by client_id (a daemon re-registers after a restart)."""
        now = time.time()
        with self._transaction() as conn:
            for member in members:
                node_id = non_negative("member flower_node_id", member.flower_node_id)
                check_node_id(node_id)
                conn.execute(
                    """INSERT INTO members VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (client_id) DO UPDATE SET flower_node_id = excluded.flower_node_id,
                        peer_address = excluded.peer_address, num_samples = excluded.num_samples,
                        updated_at = excluded.updated_at""",
                    (
                        non_negative("member client_id", member.client_id),
                        str(node_id),
                        member.peer_address,
                        non_negative("member num_samples", member.num_samples),
                        now,
                        now,
                    ),
                )
        return self.members()

    def members(self) -> list[Member]:
        with self._transaction() as conn:
            rows = conn.execute("SELECT * FROM members ORDER BY client_id").fetchall()
        return [_member(row) for row in rows]

    def member(self, client_id: int) -> Member:
        with self._transaction() as conn:
            row = conn.execute("SELECT * FROM members WHERE client_id = ?", (client_id,)).fetchone()
        if row is None:
            raise UnknownMember(f"client {client_id} is not a registered member")
        return _member(row)

    def bind_supernode(self, client_id: int, flower_node_id: int, public_key: str) -> None:
        """Record that the SuperNode with ``public_key`` (Flower node ``flower_node_id``) is
        client ``client_id``; a client's new key replaces its old one."""
        check_node_id(flower_node_id)
        with self._transaction() as conn:
            taken = conn.execute(
                "SELECT client_id FROM supernode_keys WHERE flower_node_id = ? AND client_id != ?",
                (str(flower_node_id), client_id),
            ).fetchone()
            if taken is not None:
                raise InvalidRecord(
                    f"Flower node {flower_node_id} is already client {taken['client_id']}"
                )
            conn.execute(
                """INSERT OR REPLACE INTO supernode_keys VALUES (?, ?, ?, ?)""",
                (
                    non_negative("client_id", client_id),
                    str(flower_node_id),
                    public_key,
                    time.time(),
                ),
            )

    def unbind_supernode(self, client_id: int) -> None:
        """Forget client ``client_id``'s SuperNode key (it was revoked)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM supernode_keys WHERE client_id = ?", (client_id,))

    def supernode_keys(self) -> dict[str, int]:
        """Registered SuperNode public key (OpenSSH form) -> client id."""
        with self._transaction() as conn:
            rows = conn.execute("SELECT client_id, public_key FROM supernode_keys").fetchall()
        return {row["public_key"]: row["client_id"] for row in rows}

    def bound_supernodes(self) -> list[tuple[int, int, str]]:
        """(client id, Flower node id, public key) of every registered SuperNode key."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT client_id, flower_node_id, public_key FROM supernode_keys "
                "ORDER BY client_id"
            ).fetchall()
        return [(r["client_id"], int(r["flower_node_id"]), r["public_key"]) for r in rows]

    def rebind_supernode(self, client_id: int, public_key: str, flower_node_id: int) -> bool:
        """Record the node id a restarted SuperLink gave client ``client_id``'s key again:
        the key's binding and the member's row together, so that no reader sees one id in
        one and the other in the other. False (nothing changed) when the client's key is no
        longer ``public_key``: it was revoked, or replaced, while the key was registered."""
        check_node_id(flower_node_id)
        with self._transaction() as conn:
            changed = conn.execute(
                "UPDATE supernode_keys SET flower_node_id = ? WHERE client_id = ? "
                "AND public_key = ?",
                (str(flower_node_id), client_id, public_key),
            ).rowcount
            if changed:
                conn.execute(
                    "UPDATE members SET flower_node_id = ?, updated_at = ? WHERE client_id = ?",
                    (str(flower_node_id), time.time(), client_id),
                )
        return bool(changed)

    def supernode_bindings(self) -> dict[int, int]:
        """Flower node id -> client id of every registered SuperNode key."""
        with self._transaction() as conn:
            rows = conn.execute("SELECT client_id, flower_node_id FROM supernode_keys").fetchall()
        return {int(row["flower_node_id"]): row["client_id"] for row in rows}

    # Runs

    def create_run(self, run_id: str, method: str, config: Mapping[str, Any]) -> Run:
        """Create a run, or resume the existing one with this id, method and config.

        Resuming sets a stopped or failed run back to running; a finished run stays
        finished. The same id with another method or config is a RunConflict.
        """
        check_run_id(run_id)
        if not method:
            raise InvalidRecord("a run needs a method name")
        if not isinstance(config, Mapping):
            raise InvalidRecord(f"a run config must be a JSON object, got {type(config).__name__}")
        try:
            config_json = json.dumps(config, sort_keys=True, default=json_scalar)
        except (TypeError, ValueError) as error:
            raise InvalidRecord(f"run config is not JSON: {error}") from None
        now = time.time()
        with self._transaction() as conn:
            row = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, 'running', NULL, '', ?, ?)",
                    (run_id, method, config_json, now, now),
                )
            elif row["method"] != method or row["config_json"] != config_json:
                raise RunConflict(
                    f"run {run_id} already exists with method {row['method']} and another "
                    "config; choose a new run id"
                )
            elif row["status"] in ("stopped", "failed"):
                conn.execute(
                    "UPDATE runs SET status = 'running', message = '', updated_at = ? "
                    "WHERE run_id = ?",
                    (now, run_id),
                )
        return self.run(run_id)

    def run(self, run_id: str) -> Run:
        with self._transaction() as conn:
            return _run(self._run_row(conn, run_id))

    def runs(self) -> list[Run]:
        with self._transaction() as conn:
            rows = conn.execute("SELECT * FROM runs ORDER BY created_at, run_id").fetchall()
        return [_run(row) for row in rows]

    def last_completed_round(self, run_id: str) -> int | None:
        """The round a restarted ServerApp resumes after (None: start from the beginning)."""
        return self.run(run_id).last_completed_round

    def request_stop(self, run_id: str) -> Run:
        """Mark the run stopping; the ServerApp notices and ends it cleanly."""
        with self._transaction() as conn:
            row = self._run_row(conn, run_id)
            if row["status"] in END_STATUSES:
                raise RunNotActive(f"run {run_id} has already ended ({row['status']})")
            conn.execute(
                "UPDATE runs SET status = 'stopping', updated_at = ? WHERE run_id = ?",
                (time.time(), run_id),
            )
        return self.run(run_id)

    def finish_run(self, run_id: str, status: str, message: str = "") -> Run:
        """End a run; repeating the same end status is a no-op so a retried call succeeds."""
        if status not in END_STATUSES:
            raise InvalidRecord(f"a run ends as one of {', '.join(END_STATUSES)}, not {status!r}")
        with self._transaction() as conn:
            row = self._run_row(conn, run_id)
            if row["status"] == status:
                return _run(row)
            if row["status"] in END_STATUSES:
                raise RunNotActive(f"run {run_id} has already ended ({row['status']})")
            now = time.time()
            conn.execute(
                "UPDATE runs SET status = ?, message = ?, updated_at = ? WHERE run_id = ?",
                (status, message, now, run_id),
            )
            conn.execute(
                "INSERT INTO run_ends VALUES (?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                "status = excluded.status, ended_at = excluded.ended_at",
                (run_id, status, now),
            )
            self._prune_ended_runs(conn)
        return self.run(run_id)

    def _prune_ended_runs(self, conn: sqlite3.Connection) -> None:
        """Drop the rounds (with their graphs, metrics, coalitions) and events of the ended
        runs beyond the ``keep_ended_runs`` that ended last."""
        older = (
            "SELECT run_id FROM run_ends WHERE run_id IN "
            f"(SELECT run_id FROM runs WHERE status IN {END_STATUSES}) "
            "ORDER BY ended_at DESC LIMIT -1 OFFSET ?"
        )
        for table in ("rounds", "events"):
            conn.execute(f"DELETE FROM {table} WHERE run_id IN ({older})", (self.keep_ended_runs,))

    def run_ends(self, since: float, limit: int = MAX_RUN_ENDS) -> dict[str, RunEnd]:
        """The latest ``limit`` runs that ended at or after ``since`` (coordinator clock),
        each with its latest end: participants refuse the tickets issued before it
        (kernel/tickets.py)."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT run_id, status, ended_at FROM run_ends WHERE ended_at >= ? "
                "ORDER BY ended_at DESC LIMIT ?",
                (since, limit),
            ).fetchall()
        return {row["run_id"]: RunEnd(row["status"], row["ended_at"]) for row in rows}

    def set_run_message(self, run_id: str, message: str) -> Run:
        """Say what an active run is doing now ("" clears it); an ended run keeps the
        message it ended with."""
        if len(message) > MAX_RUN_MESSAGE:
            raise InvalidRecord(f"a run message is one line of at most {MAX_RUN_MESSAGE} chars")
        with self._transaction() as conn:
            row = self._run_row(conn, run_id)
            if row["status"] in END_STATUSES:
                raise RunNotActive(f"run {run_id} has ended ({row['status']})")
            conn.execute(
                "UPDATE runs SET message = ?, updated_at = ? WHERE run_id = ?",
                (message, time.time(), run_id),
            )
        return self.run(run_id)

    def active_run(self, run_id: str) -> Run:
        """The run, which must still be running or stopping."""
        run = self.run(run_id)
        if not run.active:
            raise RunNotActive(f"run {run_id} has ended ({run.status})")
        return run

    def new_launch(self, run_id: str) -> str:
        """A fresh launch token for the run's next ServerApp; every earlier one goes stale.

        Only its hash is kept, so reading the database does not let anyone write as the
        ServerApp.
        """
        token = secrets.token_urlsafe(32)
        with self._transaction() as conn:
            self._run_row(conn, run_id)
            conn.execute(
                "INSERT INTO launches VALUES (?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                "token_sha256 = excluded.token_sha256, launched_at = excluded.launched_at",
                (run_id, _sha256(token), time.time()),
            )
        return token

    def check_launch(self, run_id: str, token: str) -> None:
        """StaleLaunch unless ``token`` is the one of the run's latest launch."""
        with self._transaction() as conn:
            self._run_row(conn, run_id)
            row = conn.execute(
                "SELECT token_sha256 FROM launches WHERE run_id = ?", (run_id,)
            ).fetchone()
        if not token:
            raise StaleLaunch(f"run {run_id}: a ServerApp write needs the run's launch token")
        if row is None or not hmac.compare_digest(row["token_sha256"], _sha256(token)):
            raise StaleLaunch(
                f"run {run_id}: launch token is not the latest launch's (a ServerApp left "
                "over from an earlier launch?)"
            )

    @staticmethod
    def _run_row(conn: sqlite3.Connection, run_id: str) -> sqlite3.Row:
        row: sqlite3.Row | None = conn.execute(
            "SELECT * FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise UnknownRun(f"no run {run_id!r}")
        return row

    # Rounds

    def record_round(
        self,
        run_id: str,
        round: int,
        edges: Iterable[Edge],
        metrics: Mapping[int, Mapping[str, Any]],
        num_clients: int = 0,
        coalitions: Iterable[Iterable[int]] | None = None,
        window: RoundWindow | None = None,
    ) -> Run:
        """Store one completed round, replacing any earlier record of the same round, and
        with a ``window`` forget the rounds that left it (``_forget_old_rounds``).

        Replacing (rather than refusing) makes a resumed run's re-sent round harmless. The
        last completed round is the largest round recorded. ``num_clients`` 0 means one
        more than the largest client index seen. ``coalitions`` (None: the method has none)
        are stored in canonical order: members sorted, coalitions by first member.
        """
        round = non_negative("round", round)
        num_clients = non_negative("num_clients", num_clients)
        edge_list = checked_edges(edges)
        metrics_json = checked_metrics(metrics)
        partition = None if coalitions is None else checked_coalitions(coalitions)
        members = [c for coalition in partition or [] for c in coalition]
        indices = [c for i, j, _ in edge_list for c in (i, j)] + list(metrics_json) + members
        size = num_clients or (max(indices) + 1 if indices else 0)
        if members and max(members) >= size:
            raise InvalidRecord(
                f"coalition member {max(members)} outside a graph of {size} clients"
            )
        if indices and max(indices) >= size:
            raise InvalidRecord(f"client index {max(indices)} outside a graph of {size} clients")
        now = time.time()
        with self._transaction() as conn:
            row = self._run_row(conn, run_id)
            if row["status"] in END_STATUSES:
                raise RunNotActive(f"run {run_id} has ended ({row['status']}); rounds refused")
            conn.execute("DELETE FROM rounds WHERE run_id = ? AND round = ?", (run_id, round))
            conn.execute(
                "INSERT INTO rounds (run_id, round, num_clients, recorded_at, has_coalitions) "
                "VALUES (?, ?, ?, ?, ?)",
                (run_id, round, size, now, partition is not None),
            )
            conn.executemany(
                "INSERT INTO edges VALUES (?, ?, ?, ?, ?)",
                [(run_id, round, i, j, w) for i, j, w in edge_list],
            )
            conn.executemany(
                "INSERT INTO metrics VALUES (?, ?, ?, ?)",
                [(run_id, round, client, text) for client, text in metrics_json.items()],
            )
            conn.executemany(
                "INSERT INTO coalitions VALUES (?, ?, ?, ?)",
                [
                    (run_id, round, client, index)
                    for index, coalition in enumerate(partition or [])
                    for client in coalition
                ],
            )
            last_row = row["last_completed_round"]
            last = round if last_row is None else max(last_row, round)
            conn.execute(
                "UPDATE runs SET last_completed_round = ?, updated_at = ? WHERE run_id = ?",
                (last, now, run_id),
            )
            if window is not None:
                _forget_old_rounds(conn, run_id, last, window)
        return self.run(run_id)

    def round(self, run_id: str, round: int) -> RoundRecord:
        with self._transaction() as conn:
            run = self._run_row(conn, run_id)
            row = conn.execute(
                "SELECT * FROM rounds WHERE run_id = ? AND round = ?", (run_id, round)
            ).fetchone()
            if row is None:
                raise _unknown_round(run, round)
            edges = self._edges(conn, run_id).get(round, [])
            metrics = self._metrics(conn, run_id).get(round, {})
            coalitions = self._coalitions(conn, run_id).get(round)
        return RoundRecord(
            run_id, round, row["num_clients"], edges, metrics, row["recorded_at"], coalitions
        )

    def graph_history(self, run_id: str) -> list[RoundGraph]:
        """Every recorded round's graph, in round order (rounds without edges included)."""
        with self._transaction() as conn:
            self._run_row(conn, run_id)
            rounds = conn.execute(
                "SELECT round, num_clients FROM rounds WHERE run_id = ? ORDER BY round", (run_id,)
            ).fetchall()
            edges = self._edges(conn, run_id)
        return [RoundGraph(r["round"], r["num_clients"], edges.get(r["round"], [])) for r in rounds]

    def metrics(self, run_id: str) -> dict[int, dict[int, dict[str, Any]]]:
        """Per round, per client: the metrics recorded, rounds in order."""
        with self._transaction() as conn:
            self._run_row(conn, run_id)
            rounds = conn.execute(
                "SELECT round FROM rounds WHERE run_id = ? ORDER BY round", (run_id,)
            ).fetchall()
            metrics = self._metrics(conn, run_id)
        return {r["round"]: metrics.get(r["round"], {}) for r in rounds}

    def coalitions(self, run_id: str, round: int | None = None) -> dict[int, Coalitions]:
        """Per round that recorded coalitions, in round order: its coalitions.

        With ``round``: that round only, or nothing when it was recorded without coalitions;
        a round never recorded is UnknownRound.
        """
        with self._transaction() as conn:
            run = self._run_row(conn, run_id)
            if round is not None and not _round_exists(conn, run_id, round):
                raise _unknown_round(run, round)
            by_round = self._coalitions(conn, run_id)
        return by_round if round is None else {r: c for r, c in by_round.items() if r == round}

    @staticmethod
    def _coalitions(conn: sqlite3.Connection, run_id: str) -> dict[int, Coalitions]:
        by_round: dict[int, Coalitions] = {
            row["round"]: []
            for row in conn.execute(
                "SELECT round FROM rounds WHERE run_id = ? AND has_coalitions ORDER BY round",
                (run_id,),
            )
        }
        for row in conn.execute(
            "SELECT round, coalition, client_id FROM coalitions WHERE run_id = ? "
            "ORDER BY round, coalition, client_id",
            (run_id,),
        ):
            coalitions = by_round[row["round"]]
            if row["coalition"] == len(coalitions):
                coalitions.append([])
            coalitions[row["coalition"]].append(row["client_id"])
        return by_round

    @staticmethod
    def _edges(conn: sqlite3.Connection, run_id: str) -> dict[int, list[Edge]]:
        by_round: dict[int, list[Edge]] = {}
        for row in conn.execute(
            "SELECT round, i, j, weight FROM edges WHERE run_id = ? ORDER BY round, i, j",
            (run_id,),
        ):
            by_round.setdefault(row["round"], []).append((row["i"], row["j"], row["weight"]))
        return by_round

    @staticmethod
    def _metrics(conn: sqlite3.Connection, run_id: str) -> dict[int, dict[int, dict[str, Any]]]:
        by_round: dict[int, dict[int, dict[str, Any]]] = {}
        for row in conn.execute(
            "SELECT round, client_id, metrics_json FROM metrics WHERE run_id = ? "
            "ORDER BY round, client_id",
            (run_id,),
        ):
            by_round.setdefault(row["round"], {})[row["client_id"]] = json.loads(
                row["metrics_json"]
            )
        return by_round

    # Events

    def record_event(
        self,
        run_id: str,
        kind: str,
        message: str = "",
        level: str = "warning",
        round: int | None = None,
        client_id: int | None = None,
    ) -> Event:
        """Keep an event; ``run_id`` empty for one that concerns the whole federation."""
        if level not in EVENT_LEVELS:
            raise InvalidRecord(f"event level must be one of {', '.join(EVENT_LEVELS)}")
        if not kind:
            raise InvalidRecord("an event needs a kind (e.g. peer_skipped)")
        for name, value in (("event round", round), ("event client_id", client_id)):
            if value is not None:
                non_negative(name, value)
        now = time.time()
        with self._transaction() as conn:
            if run_id:
                self._run_row(conn, run_id)
            cursor = conn.execute(
                "INSERT INTO events (run_id, round, level, kind, client_id, message, time) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id or None, round, level, kind, client_id, message, now),
            )
            event_id = int(cursor.lastrowid or 0)
        return Event(event_id, run_id, level, kind, message, now, round, client_id)

    def events(self, run_id: str = "", after_id: int = 0, limit: int = 0) -> list[Event]:
        """Events oldest first; ``run_id`` empty: all of them; ``limit`` 0: no limit."""
        non_negative("after_id", after_id)
        non_negative("limit", limit)
        query = "SELECT * FROM events WHERE event_id > ?"
        args: list[Any] = [after_id]
        with self._transaction() as conn:
            if run_id:
                self._run_row(conn, run_id)
                query += " AND run_id = ?"
                args.append(run_id)
            query += " ORDER BY event_id" + (" LIMIT ?" if limit else "")
            rows = conn.execute(query, [*args, limit] if limit else args).fetchall()
        return [
            Event(
                row["event_id"],
                row["run_id"] or "",
                row["level"],
                row["kind"],
                row["message"],
                row["time"],
                row["round"],
                row["client_id"],
            )
            for row in rows
        ]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _forget_old_rounds(
    conn: sqlite3.Connection, run_id: str, last: int, window: RoundWindow
) -> None:
    """Delete the rounds that left the run's window, with their graph, metrics, coalitions
    and events: those more than ``keep_last`` rounds before ``last``, but for multiples of
    ``keep_every`` (the run folder's graph retention, engine/report/run_dir.py). SQLite
    reuses the freed pages for the rounds that follow, so a long run's records stop growing
    once its window is full (issue #32)."""
    keep_last, keep_every = window
    for table in ("rounds", "events"):  # a round's graph, metrics... go with it (cascade)
        conn.execute(
            f"DELETE FROM {table} WHERE run_id = ? AND round <= ? AND round % ? != 0",
            (run_id, last - keep_last, keep_every),
        )


def _unknown_round(run: sqlite3.Row, round: int) -> UnknownRound:
    """A round the run never recorded, or one its records no longer keep."""
    last = run["last_completed_round"]
    if last is not None and 0 <= round <= last:
        return UnknownRound(
            f"run {run['run_id']} no longer keeps round {round}: the coordinator keeps a window "
            "of a run's rounds, and none of runs that ended long ago "
            "(docs/deployment.md#retention); every round's metrics are in the run folder's "
            "metrics.jsonl"
        )
    return UnknownRound(f"run {run['run_id']} has no recorded round {round}")


def _round_exists(conn: sqlite3.Connection, run_id: str, round: int) -> bool:
    query = "SELECT 1 FROM rounds WHERE run_id = ? AND round = ?"
    return conn.execute(query, (run_id, round)).fetchone() is not None


def _member(row: sqlite3.Row) -> Member:
    return Member(
        row["client_id"],
        int(row["flower_node_id"]),
        row["peer_address"],
        row["num_samples"],
        row["registered_at"],
        row["updated_at"],
    )


def _run(row: sqlite3.Row) -> Run:
    return Run(
        row["run_id"],
        row["method"],
        json.loads(row["config_json"]),
        row["status"],
        row["last_completed_round"],
        row["created_at"],
        row["updated_at"],
        row["message"],
    )
