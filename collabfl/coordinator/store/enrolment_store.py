"""Join tokens and enrolled identities, kept in the coordinator's SQLite file (its tables
and migrations: coordinator/store/database.py).

A join token is stored only as the SHA-256 of its secret: a copy of the database admits no
one. A token names one identity (a member's client id or an operator's name), expires, and
is spent by its first successful use. An enrolment is what a spent token produced: the
certificate issued (serial, expiry) and the host it names; revoking it puts the serial on
the deny list that the coordinator service and every peer server consult. A member's token,
and so its enrolment, may carry the training samples the operator vouches for
(``admin invite --samples``): the ServerApp holds the member's reported count to it.
"""

from __future__ import annotations

import hmac
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from collabfl.coordinator.store.database import Database


@dataclass(frozen=True)
class JoinToken:
    """A minted token's record (never its secret)."""

    token_id: str
    role: str
    subject: str
    hosts: tuple[str, ...]
    created_at: float
    expires_at: float
    used_at: float | None = None
    samples: int | None = None
    """The member's training samples the operator declared, if any."""


@dataclass(frozen=True)
class Enrolment:
    """The identity a token enrolled: its certificate's serial and expiry, and its host."""

    role: str
    subject: str
    host: str
    cert_serial: str
    cert_not_after: float
    enrolled_at: float
    revoked_at: float | None = None
    samples: int | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class TokenRefused(PermissionError):
    """A join token that is unknown, spent, expired, or shown with the wrong secret."""


class EnrolmentStore:
    """Tokens, enrolments and revoked serials in the SQLite file at ``db_path``."""

    def __init__(self, database: Database | Path | str) -> None:
        self._owns_database = not isinstance(database, Database)
        self.database = database if isinstance(database, Database) else Database(database)
        self.path = self.database.path

    def close(self) -> None:
        """Close the file, if this store opened it (a shared ``Database`` is its opener's)."""
        if self._owns_database:
            self.database.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self.database.transaction() as conn:
            yield conn

    def add_token(self, token: JoinToken, secret_sha256: str) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO join_tokens (token_id, secret_sha256, role, subject, hosts_json, "
                "created_at, expires_at, used_at, samples) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                (
                    token.token_id,
                    secret_sha256,
                    token.role,
                    token.subject,
                    json.dumps(list(token.hosts)),
                    token.created_at,
                    token.expires_at,
                    token.samples,
                ),
            )

    def valid_token(self, token_id: str, secret_sha256: str, now: float) -> JoinToken:
        """The token, if it may be spent now; TokenRefused (saying why) if not."""
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT * FROM join_tokens WHERE token_id = ?", (token_id,)
            ).fetchone()
            voided = (
                row is not None
                and conn.execute(
                    "SELECT 1 FROM enrolments WHERE role = ? AND subject = ? AND revoked_at = ?",
                    (row["role"], row["subject"], row["used_at"]),
                ).fetchone()
                is not None
            )
        if row is None or not hmac.compare_digest(row["secret_sha256"], secret_sha256):
            raise TokenRefused("unknown join token")
        # The holder showed the secret: it may learn whom the token was for, and the join
        # names that identity in the remedy (kernel/join_client.py).
        token = f"join token {token_id} for {row['role']} {row['subject']}"
        if voided:
            raise TokenRefused(f"{token} was void: {row['role']} {row['subject']} was revoked")
        if row["used_at"] is not None:
            raise TokenRefused(f"{token} was already used")
        if row["expires_at"] <= now:
            raise TokenRefused(f"{token} has expired")
        return _token(row, used_at=None)

    def spend_token(self, token_id: str, now: float) -> None:
        """Mark the token used: it admits no one after this."""
        with self._transaction() as conn:
            conn.execute("UPDATE join_tokens SET used_at = ? WHERE token_id = ?", (now, token_id))

    def tokens(self) -> list[JoinToken]:
        with self._transaction() as conn:
            rows = conn.execute("SELECT * FROM join_tokens ORDER BY created_at").fetchall()
        return [_token(row, used_at=row["used_at"]) for row in rows]

    def record_enrolment(self, enrolment: Enrolment) -> None:
        """Keep what a token enrolled; a re-enrolment replaces the identity's record."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO enrolments (role, subject, host, cert_serial, "
                "cert_not_after, enrolled_at, revoked_at, samples) VALUES (?, ?, ?, ?, ?, ?, "
                "NULL, ?)",
                (
                    enrolment.role,
                    enrolment.subject,
                    enrolment.host,
                    enrolment.cert_serial,
                    enrolment.cert_not_after,
                    enrolment.enrolled_at,
                    enrolment.samples,
                ),
            )

    def enrolments(self, role: str | None = None) -> list[Enrolment]:
        query, params = "SELECT * FROM enrolments", [] if role is None else [role]
        if role is not None:
            query += " WHERE role = ?"
        with self._transaction() as conn:
            rows = conn.execute(query + " ORDER BY role, subject", params).fetchall()
        return [
            Enrolment(
                row["role"],
                row["subject"],
                row["host"],
                row["cert_serial"],
                row["cert_not_after"],
                row["enrolled_at"],
                row["revoked_at"],
                row["samples"],
            )
            for row in rows
        ]

    def declared_samples(self) -> dict[int, int]:
        """Client id -> training samples declared at enrolment, for members not revoked."""
        return {
            int(e.subject): e.samples
            for e in self.enrolments("member")
            if e.samples is not None and not e.revoked
        }

    def revoke(self, role: str, subject: str, now: float | None = None) -> Enrolment | None:
        """Deny the identity's current certificate; its record, or None if never enrolled."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT * FROM enrolments WHERE role = ? AND subject = ?", (role, subject)
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "INSERT OR IGNORE INTO revoked_serials VALUES (?, ?, ?, ?)",
                (row["cert_serial"], role, subject, now),
            )
            conn.execute(
                "UPDATE enrolments SET revoked_at = ? WHERE role = ? AND subject = ?",
                (now, role, subject),
            )
            # Unspent tokens for the identity go too: revoking must not leave a way back in.
            conn.execute(
                "UPDATE join_tokens SET used_at = ? "
                "WHERE role = ? AND subject = ? AND used_at IS NULL",
                (now, role, subject),
            )
        return self.enrolment(role, subject)

    def enrolment(self, role: str, subject: str) -> Enrolment | None:
        return next(
            (e for e in self.enrolments(role) if e.subject == subject),
            None,
        )

    def revoked_serials(self) -> frozenset[str]:
        with self._transaction() as conn:
            rows = conn.execute("SELECT cert_serial FROM revoked_serials").fetchall()
        return frozenset(row["cert_serial"] for row in rows)


def _token(row: sqlite3.Row, used_at: float | None) -> JoinToken:
    return JoinToken(
        row["token_id"],
        row["role"],
        row["subject"],
        tuple(json.loads(row["hosts_json"])),
        row["created_at"],
        row["expires_at"],
        used_at,
        row["samples"],
    )
