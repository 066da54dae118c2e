"""``admin status`` and ``admin members`` from any machine list the members by client id,
host, online/offline, last seen, SuperNode registered and certificate expiry: joined from
the registered SuperNode keys, the enrolments, the members table and the SuperLink's node
list, through a real coordinator service on loopback.

Before, an operator's laptop said "0 members" while three SuperNodes were connected (the
members table fills only when a run starts) and the coordinator machine listed bare Flower
node ids.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flwr.cli.supernode.ls import _to_json
from support.coordinator import served
from typer.testing import CliRunner, Result

from collabfl.cli.admin import admin_app, tables
from collabfl.coordinator.member_status import SupernodeList
from collabfl.coordinator.store.enrolment_store import Enrolment, EnrolmentStore
from collabfl.coordinator.store.state import CoordinatorState, Member
from collabfl.engine.report.console import plain_console

NODE = {0: 5000, 1: 5001, 2: 5002}
"""Registered SuperNode keys: client id -> the Flower node id the key got."""
STRANGER = 7777
YEAR_S = 365 * 24 * 3600.0
LEFT_AT = "2026-11-26 04:00:00Z"


def _flwr_node(node_id: int, status: str, offline_at: str = "N/A") -> dict[str, Any]:
    """One node as ``flwr supernode list --format json`` prints it (see the contract test)."""
    row = (node_id, "<none>", status, "2026-11-26 03:00:00Z", "2026-11-26 03:00:01Z",
           offline_at, "N/A", 12.0)  # fmt: skip
    return json.loads(_to_json([row], verbose=False))["nodes"][0]


NODES = [
    _flwr_node(NODE[0], "online"),
    _flwr_node(NODE[1], "online"),
    _flwr_node(NODE[2], "offline", LEFT_AT),
    _flwr_node(STRANGER, "online"),
]


@pytest.fixture
def state(tmp_path: Path) -> Iterator[CoordinatorState]:
    """Three registered SuperNodes (no run yet, so no members table rows but for client 3,
    which joined an earlier run), two of them enrolled."""
    with CoordinatorState(tmp_path / "coordinator.db") as opened:
        for client, node in NODE.items():
            opened.bind_supernode(client, node, f"ecdsa-sha2-nistp384 KEY{client}")
        opened.register_members([Member(3, 6003, "lab-d.example.org:9400", 40)])
        opened.register_members([Member(4, 6004, "lab-[bold]e[/bold]:9400", 40)])  # a liar's
        store = EnrolmentStore(opened.path)
        now = time.time()
        for client, host in ((0, "lab-a.example.org"), (1, "lab-b.example.org")):
            store.record_enrolment(
                Enrolment("member", str(client), host, f"0{client}", now + YEAR_S, now)
            )
        store.revoke("member", "1")
        store.close()
        yield opened


def _admin(address: str, *args: str) -> Result:
    result = CliRunner().invoke(admin_app, ["--coordinator", address, *args])
    assert result.exit_code == 0, result.output
    return result


def test_status_lists_members_by_client_id_and_host(
    state: CoordinatorState, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "console", plain_console(width=80))
    with served(state, supernodes=SupernodeList(lambda: NODES)) as address:
        document = json.loads(_admin(address, "status", "--json").stdout)
        text = _admin(address, "status").stdout
        monkeypatch.setattr(tables, "console", plain_console(width=160))
        members = _admin(address, "members").stdout
        members_json = json.loads(_admin(address, "members", "--json").stdout)
    assert document["num_members"] == 5
    by_client = {m["client_id"]: m for m in document["members"]}
    assert sorted(by_client) == [0, 1, 2, 3, 4]
    assert [by_client[c]["host"] for c in range(4)] == [
        "lab-a.example.org", "lab-b.example.org", "", "lab-d.example.org"
    ]  # fmt: skip
    assert [by_client[c]["presence"] for c in range(4)] == [
        "online", "online", "offline", "offline"
    ]  # fmt: skip
    assert [by_client[c]["supernode_registered"] for c in range(4)] == [True, True, True, False]
    assert by_client[0]["cert_not_after"] > time.time() + YEAR_S / 2
    assert (by_client[1]["revoked"], by_client[2]["cert_not_after"]) == (True, 0.0)
    assert by_client[2]["last_seen"] == 1795665600.0  # LEFT_AT in Unix seconds
    assert by_client[0]["last_seen"] >= time.time() - 60
    assert document["unbound_nodes"] == [STRANGER]
    assert members_json == document["members"]

    assert "5 members (2 online)" in text
    assert "lab-[bold]e[/bold]" in text  # shown as written, not as markup
    assert "[green]" not in text and "[yellow]" not in text  # our styles are styles
    expiry = time.strftime("%Y-%m-%d", time.localtime(by_client[0]["cert_not_after"]))
    for expected in ("lab-a.example.org", "online", "offline", "yes", expiry, "revoked"):
        assert expected in text, text
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert f"no member's: {STRANGER}" in text
    assert "lab-d.example.org:9400" in members and "6003" in members


def test_status_says_when_the_superlink_cannot_be_read(state: CoordinatorState) -> None:
    def down() -> list[dict[str, Any]]:
        raise ConnectionError("SuperLink unavailable")

    with served(state, supernodes=SupernodeList(down)) as address:
        document = json.loads(_admin(address, "status", "--json").stdout)
        text = _admin(address, "status").stdout
    assert {m["presence"] for m in document["members"]} == {"unknown"}
    assert "SuperLink unavailable" in document["supernodes_error"]
    assert "online/offline unknown: ConnectionError: SuperLink unavailable" in text


def test_supernode_list_is_cached_and_a_slow_read_does_not_hold_status() -> None:
    reads: list[float] = []
    release = threading.Event()

    def read() -> list[dict[str, Any]]:
        reads.append(time.monotonic())
        if len(reads) > 1:
            release.wait(30)
        return NODES

    listing = SupernodeList(read, max_age_s=0.2, first_wait_s=10)
    assert listing.get()[:2] == (NODES, "")
    assert listing.get()[:2] == (NODES, "") and len(reads) == 1  # fresh: no second read
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(reads) < 2:
        time.sleep(0.3)
        started = time.monotonic()
        assert listing.get()[:2] == (NODES, "")  # stale: the last list at once, a read behind it
        assert time.monotonic() - started < 1.0
    assert len(reads) == 2
    release.set()


def test_flwr_supernode_list_json_contract() -> None:
    """Flower internals we rely on: the keys of ``flwr supernode list --format json`` and
    its UTC times with a trailing Z (coordinator/member_status.py reads them)."""
    node = _flwr_node(12, "offline", LEFT_AT)
    assert {"node-id", "status", "online-at", "offline-at"} <= set(node)
    assert (node["node-id"], node["status"], node["offline-at"]) == ("12", "offline", LEFT_AT)
