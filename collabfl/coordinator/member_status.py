"""The operator's view of the federation's members: who, where, online, since when.

No single record knows it all. A member appears in up to three places in the coordinator's
SQLite file (its registered SuperNode key, its enrolment: host and certificate, and the
members table once it joined a run) and its SuperNode in the SuperLink's node list, which
only the coordinator's machine can read (its Control API on loopback). ``member_statuses``
joins them by client id (Flower node ids map to client ids through the registered keys and
the members table); ``SupernodeList`` keeps the SuperLink's list fresh enough without making
every ``Status`` call wait for the SuperLink.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from collabfl.coordinator.store.enrolment_store import Enrolment
from collabfl.coordinator.store.records import Member

ONLINE, OFFLINE, UNKNOWN = "online", "offline", "unknown"

NodeReader = Callable[[], list[dict[str, Any]]]
"""Reads the SuperLink's node list, each node as ``flwr supernode list --format json`` prints
it (coordinator/superlink/superlink_control.py)."""


@dataclass(frozen=True)
class MemberStatus:
    """One member as the operator sees it; 0 / "" where nothing is known."""

    client_id: int
    host: str
    presence: str
    """ONLINE, OFFLINE or UNKNOWN (the SuperLink's node list could not be read)."""
    last_seen: float
    supernode_registered: bool
    cert_not_after: float
    revoked: bool
    flower_node_id: int
    peer_address: str


class SupernodeList:
    """The SuperLink's node list, read at most every ``max_age_s`` seconds in the background.

    ``get`` returns the last list read (and why none, if reading failed) at once; a stale
    list starts one refresh. Only the very first call waits for a read, up to ``first_wait_s``.
    """

    def __init__(self, read: NodeReader, max_age_s: float = 5.0, first_wait_s: float = 3.0) -> None:
        self._read = read
        self.max_age_s = max_age_s
        self.first_wait_s = first_wait_s
        self._lock = threading.Lock()
        self._nodes: list[dict[str, Any]] | None = None
        self._error = "the SuperLink's node list has not been read yet"
        self._read_at = float("-inf")
        self._read_wall = 0.0
        self._refreshing: threading.Thread | None = None

    def get(self) -> tuple[list[dict[str, Any]] | None, str, float]:
        """The nodes (None: unknown), why unknown, and when they were read (Unix seconds)."""
        with self._lock:
            stale = time.monotonic() - self._read_at > self.max_age_s
            if stale and self._refreshing is None:
                self._refreshing = threading.Thread(
                    target=self._refresh, name="supernode-list", daemon=True
                )
                self._refreshing.start()
            first = self._refreshing if self._read_at == float("-inf") else None
        if first is not None:
            first.join(self.first_wait_s)
        with self._lock:
            return self._nodes, self._error, self._read_wall

    def _refresh(self) -> None:
        try:
            nodes, error = self._read(), ""
        except Exception as failure:  # the SuperLink down or refusing: say so, keep serving
            nodes, error = None, f"{type(failure).__name__}: {failure}"
        with self._lock:
            self._nodes, self._error = nodes, error
            self._read_at, self._read_wall = time.monotonic(), time.time()
            self._refreshing = None


def member_statuses(
    members: Iterable[Member],
    bindings: Mapping[int, int],
    enrolments: Iterable[Enrolment],
    nodes: list[dict[str, Any]] | None,
    read_at: float = 0.0,
) -> tuple[list[MemberStatus], list[int]]:
    """Every known member by client id, and the online Flower nodes bound to no member.

    ``bindings``: Flower node id -> client id of the registered SuperNode keys. ``nodes``:
    the SuperLink's list (None: unknown), read at ``read_at``. A member's node is its
    registered key's, else the one it last joined a run with.
    """
    joined = {m.client_id: m for m in members}
    registered = {client: node for node, client in bindings.items()}
    enrolled = {int(e.subject): e for e in enrolments if e.subject.isdigit()}
    by_node = {_node_id(n): n for n in nodes or ()}
    by_node.pop(None, None)
    statuses = []
    for client_id in sorted({*joined, *registered, *enrolled}):
        member, enrolment = joined.get(client_id), enrolled.get(client_id)
        node_id = registered.get(client_id) or (member.flower_node_id if member else 0)
        node = by_node.get(node_id)
        presence = UNKNOWN if nodes is None else ONLINE if _online(node) else OFFLINE
        statuses.append(
            MemberStatus(
                client_id=client_id,
                host=enrolment.host if enrolment and enrolment.host else _host(member),
                presence=presence,
                last_seen=read_at if _online(node) else _last_seen(node, member),
                supernode_registered=client_id in registered,
                cert_not_after=enrolment.cert_not_after if enrolment else 0.0,
                revoked=enrolment.revoked if enrolment else False,
                flower_node_id=node_id,
                peer_address=member.peer_address if member else "",
            )
        )
    known = {s.flower_node_id for s in statuses}
    unbound = sorted(n for n, node in by_node.items() if n and _online(node) and n not in known)
    return statuses, unbound


def _node_id(node: Mapping[str, Any]) -> int | None:
    try:
        return int(node.get("node-id", ""))
    except (TypeError, ValueError):
        return None


def _online(node: Mapping[str, Any] | None) -> bool:
    return node is not None and node.get("status") == ONLINE


def _last_seen(node: Mapping[str, Any] | None, member: Member | None) -> float:
    """When an offline node went offline, else when its member last joined a run."""
    offline_at = _timestamp(node.get("offline-at")) if node else None
    if offline_at is not None:
        return offline_at
    return member.updated_at if member else 0.0


def _timestamp(text: object) -> float | None:
    """Unix seconds of one of flwr's UTC times ("2026-11-26 04:30:00Z"; "N/A": none)."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _host(member: Member | None) -> str:
    """The host part of a member's peer address ("lab-a.example.org:9400", "[::1]:9400")."""
    if member is None or not member.peer_address:
        return ""
    host = member.peer_address.rpartition(":")[0] or member.peer_address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host
