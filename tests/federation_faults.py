"""Helpers for the fault tests with real processes (not a test module itself)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.report.run_dir import read_run
from collabfl.engine.run_options import RunOptions
from collabfl.kernel.leftovers import PROC, owner_of, start_ticks
from collabfl.launcher.federation import LocalFederation, write_client_files

BASE = [
    "data.num_train=1500",
    "data.num_test=600",
    "epochs=0.5",
    "dpfl.init_epochs=1",
    "dpfl.budget=inf",
]


def fault_config(root: Path, clients: int, rounds: int, *extra: str):
    """The DPFL config of a fault test's run (its data cached under ``root``); ``extra``:
    further ``key=value`` overrides."""
    return load_config(
        None,
        [
            *BASE,
            f"data.num_clients={clients}",
            f"rounds={rounds}",
            f"data.cache_dir={json.dumps(str(root / 'cache'))}",
            *extra,
        ],
    )


def make_federation(root: Path, clients: int, rounds: int):
    config = fault_config(root, clients, rounds)
    files = write_client_files(config, root / "data")
    return config, LocalFederation(root / "work", files)


def start_run(
    federation: LocalFederation, config, out: Path, timeout: float, run_id: str = "faulty"
) -> str:
    """Create a DPFL run of ``config`` (``run_id``: unique within the federation)."""
    spec = parse_method_spec("dpfl", config)
    with federation.client() as client:
        options = RunOptions(
            expected_clients=len(federation.client_files),
            out_dir=str(out),
            message_timeout_s=timeout,
        )
        request = run_request(spec, options)
        client.create_run(run_id, spec.label, request)
    return run_id


POLL_S = 0.2
"""How often ``wait_for`` asks the coordinator: a loopback status call costs about a
millisecond, and a round takes seconds, so a short poll adds little load and no lag."""


def wait_for(federation: LocalFederation, run_id: str, until, limit_s: float = 300):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            with federation.client() as client:
                run = client.get_run(run_id)
            if until(run):
                return run
        except ConnectionError:
            pass  # the coordinator is restarting
        time.sleep(POLL_S)
    raise AssertionError(f"run {run_id} did not reach the expected state in {limit_s} s")


def wait_event(federation: LocalFederation, run_id: str, kind: str, limit_s: float = 300):
    """The run's first event of ``kind``, once it is recorded."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with federation.client() as client:
            found = [e for e in client.list_events(run_id) if e.kind == kind]
        if found:
            return found[0]
        time.sleep(POLL_S)
    raise AssertionError(f"run {run_id} recorded no {kind!r} event in {limit_s} s")


def wait_logged(path: Path, text: str, limit_s: float = 120) -> None:
    """Wait until the log at ``path`` holds ``text`` (reading a file costs nothing, where
    asking the SuperLink through ``flwr`` starts a process that a loaded machine may not run
    within its timeout)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(POLL_S)
    raise AssertionError(f"{path} did not log {text!r} in {limit_s} s")


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (a client daemon, its SuperNode and executor,
    which run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, rest = stat.read_text().split(" ", 1)
        except OSError:
            continue
        parent = int(rest.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(pid))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def running_processes(pids: list[int]) -> dict[int, tuple[int, str]]:
    """Which of ``pids`` run now: their start times (``still_running`` later tells whether
    that same process, not a reuse of its pid, is still there) and command lines."""
    started = {pid: start_ticks(pid) for pid in pids}
    return {pid: (ticks, command_line(pid)) for pid, ticks in started.items() if ticks}


def still_running(processes: dict[int, tuple[int, str]]) -> dict[int, str]:
    """Those of ``processes`` (from ``running_processes``) that still run: their commands."""
    return {
        pid: command for pid, (ticks, command) in processes.items() if start_ticks(pid) == ticks
    }


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def federation_processes(work_dir: Path) -> dict[int, str]:
    """Processes that name a state dir under ``work_dir`` as their owner's, or it in their
    command line: their commands."""
    root = str(work_dir.resolve())
    found = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        owner = owner_of(int(entry.name))
        command = command_line(int(entry.name))
        if (owner is not None and owner.state_dir.startswith(root)) or root in command:
            found[int(entry.name)] = command
    return found


def send_signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def assert_skipped_while_gone(
    out: Path, events, rounds: int, clients: int = 4, gone: int = 3
) -> dict[int, set]:
    """The run's records after client ``gone`` went away mid-run: it missed at least one
    round, and was recorded as silent; every other client reported every round; nobody
    aggregated ``gone``'s model in a round it missed. Returns who reported each round."""
    records = read_run(out / "dpfl")
    by_round = {t: {r["client"] for r in records.rows if r["round"] == t} for t in range(rounds)}
    others = set(range(clients)) - {gone}
    assert all(others <= by_round[t] for t in range(rounds)), "the others must go on"
    missed = [t for t in range(1, rounds) if gone not in by_round[t]]
    assert missed, f"client {gone} went away but reported every round"
    assert any(e.client_id == gone and e.kind in {"no_reply", "offline"} for e in events)
    for t in missed:
        assert records.graphs[t][:, gone].sum() == 0
    return by_round


def wait_holding(supernode_log: Path, limit_s: float = 120.0) -> None:
    """Wait until the SuperNode has received a message it has not answered yet (its log
    says so; the round's training keeps it holding for a while)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        said = supernode_log.read_text(errors="replace")
        if said.count("Received successfully") > said.count("Sent successfully"):
            return
        time.sleep(0.02)
    raise AssertionError(f"{supernode_log} received no message in {limit_s} s")


def rounds_of(out: Path) -> dict[int, set[int]]:
    """Who reported each round recorded so far (a line being written is not read)."""
    try:
        rows = read_run(out / "dpfl").rows
    except (OSError, ValueError):
        return {}
    by_round: dict[int, set[int]] = {}
    for row in rows:
        by_round.setdefault(row["round"], set()).add(row["client"])
    return by_round
