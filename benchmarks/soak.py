"""Soak: a TLS federation running DPFL for a long time, with faults, watched for growth.

Four client daemons and a coordinator daemon (TLS, SuperNode auth, Fleet gateway) run on
loopback with one long DPFL run. Every ``--kill-every`` seconds one client daemon is killed
with SIGKILL (its process group) and started again ``--down`` seconds later, taking turns;
in between, one client's SuperNode alone (its daemon restarts it; the time until it joins
again is reported); once, halfway, the coordinator daemon; once, at three quarters, every
client at once. Every ``--sample-every`` seconds it samples every process of the
federation (each daemon's whole process tree: SuperLink, SuperNodes, ServerApp,
executors): resident memory and open file descriptors; the SQLite databases' sizes; the
disk used by each daemon's state folder, its logs and the run folder; and the run's last
completed round.

The report: rounds done, the run's events by kind (every round completes or is recorded
with its reason: ``offline``, ``no_reply``...), processes left running after teardown, and
growth per 1,000 rounds: per process (fitted over the longest life of its kind after
``--warm-up`` seconds; ``--kill-every 0`` runs without faults, so each lives the whole
soak; open file descriptors also as ``fd_growth_late``, the last count over the most the
first half of that life reached: a pool filling after the warm-up shows in ``fd_growth``
only, a leak in both), of each database, of each folder and of each kind of file (graph
files, metrics.jsonl, messages.jsonl, logs, databases, checkpoints, published models),
with the run folder's retention on (``--graphs-keep-last``, ``--graphs-keep-every``: small
by default, so a 30-minute soak shows the pruning; docs/deployment.md#retention). A kind
the retention bounds stops growing once its window is full, so its slope is fitted over the
samples after the first ``--graphs-keep-last`` rounds too
(``mib_per_1000_rounds_after_window``).

    python benchmarks/soak.py --minutes 30 [--clients 4] [--kill-every 180] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import command_line, environment, exit_on_sigterm, format_table

from collabfl.coordinator.service_client import CoordinatorUnreachable
from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.run_options import RunOptions
from collabfl.kernel.log_rotation import rotated
from collabfl.launcher.federation import LocalFederation, write_client_files

MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Sample:
    at_s: float
    round: int | None
    processes: dict[int, tuple[str, int, int]]
    """pid -> (label, RSS bytes, open file descriptors)."""
    files: dict[str, int]
    """database or folder -> bytes."""


@dataclass
class Soak:
    federation: LocalFederation
    run_id: str
    samples: list[Sample] = field(default_factory=list)
    faults: list[tuple[float, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    rejoins: list[float] = field(default_factory=list)
    """Seconds from a SuperNode's SIGKILL (or its daemon's restart) to its new join."""
    events: Counter[str] = field(default_factory=Counter)
    """The run's events by kind, read as they come: the coordinator keeps only a window of
    a run's rounds, and their events go with them (docs/deployment.md#retention)."""
    last_event: int = 0

    def now(self) -> float:
        return time.monotonic() - self.started

    def last_round(self) -> int | None:
        """The run's last completed round; the events since the last call are counted."""
        try:
            with self.federation.client(timeout_s=5.0) as client:
                for event in client.list_events(self.run_id, after_id=self.last_event):
                    self.events[event.kind] += 1
                    self.last_event = event.event_id
                return client.get_run(self.run_id).last_completed_round
        except CoordinatorUnreachable:
            return None  # the coordinator is down (a fault): the next sample asks again

    def sample(self) -> None:
        processes = {}
        for owner, root in self.federation.processes.items():
            for pid in _tree(root.pid):
                if (found := _process(pid)) is not None:
                    processes[pid] = (f"{owner}/{found[0]}", found[1], found[2])
        self.samples.append(Sample(self.now(), self.last_round(), processes, self._files()))

    def _files(self) -> dict[str, int]:
        work = self.federation.work_dir
        sizes = {
            f"db {db.relative_to(work)}": _size(db) + _size(Path(f"{db}-wal"))
            for db in sorted(work.rglob("*.db"))
        }
        for folder in sorted(p for p in work.iterdir() if p.is_dir() and p.name != "tls"):
            sizes[f"dir {folder.name}"] = _disk_use(folder)
        for kind, used in _disk_use_by_kind(self.federation.work_dir.parent).items():
            sizes[f"kind {kind}"] = used
        return sizes

    def joins(self, name: str) -> int:
        """How often client ``name``'s SuperNodes joined (the line flower/stale_node.py reads)."""
        log = self.federation.work_dir / name / "supernode.log"
        return sum(path.read_bytes().count(b"SuperNode ID:") for path in rotated(log))

    def wait_joined(self, name: str, before: int, since: float, limit_s: float = 180.0) -> None:
        """Record how long after ``since`` client ``name``'s SuperNode joined again."""
        while self.joins(name) <= before and time.monotonic() - since < limit_s:
            time.sleep(0.2)
        took = time.monotonic() - since
        joined = "joined again" if self.joins(name) > before else "NOT joined again"
        self.faults.append((self.now(), f"{name}: SuperNode {joined} {took:.1f} s after"))
        self.rejoins.append(took)

    def kill_supernode(self, name: str) -> None:
        """SIGKILL client ``name``'s SuperNode alone: its daemon restarts it (issue #32, 3)."""
        pid = int((self.federation.work_dir / name / "supernode.pid").read_text())
        before = self.joins(name)
        self.faults.append((self.now(), f"SIGKILL {name}'s SuperNode"))
        os.kill(pid, signal.SIGKILL)
        self.wait_joined(name, before, time.monotonic())

    def kill(self, names: Iterable[str], down_s: float) -> None:
        """SIGKILL each daemon's process group, and start it again ``down_s`` later;
        whatever of its process tree outlives it by then is recorded as an orphan."""
        names = list(names)
        trees = {pid for n in names for pid in _tree(self.federation.processes[n].pid)}
        self.faults.append((self.now(), "SIGKILL " + ", ".join(names)))
        for name in names:
            os.killpg(self.federation.processes[name].pid, signal.SIGKILL)
        for name in names:
            self.federation.processes[name].wait()
        time.sleep(down_s)
        if orphans := sorted(f"{pid} {found[0]}" for pid in trees if (found := _process(pid))):
            self.faults.append((self.now(), f"still running: {orphans}"))
        before = {name: self.joins(name) for name in names}
        restarted = time.monotonic()
        for name in names:
            self.federation._spawn(name, self.federation.commands[name])
        self.faults.append((self.now(), "restarted " + ", ".join(names)))
        for name in names:
            if name != "coordinator":
                self.wait_joined(name, before[name], restarted)


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _process(pid: int) -> tuple[str, int, int] | None:
    """(what it runs, RSS bytes, open file descriptors), None when it is gone."""
    try:
        argv = (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))[:4]
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, IndexError, ValueError):
        return None
    return _label([a.decode(errors="replace") for a in argv]), rss, fds


def _label(argv: list[str]) -> str:
    """The program: the module after -m, else the script a Python runs, else the binary."""
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1].rsplit(".", 1)[-1]
    if len(argv) > 1 and Path(argv[0]).name.startswith("python"):
        return Path(argv[1]).name
    return Path(argv[0]).name


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _disk_use(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_blocks * 512
        except OSError:
            pass
    return total


KINDS = (
    ("graph files", re.compile(r"(^|/)graphs/round_\d+\.json$")),
    ("metrics.jsonl", re.compile(r"(^|/)metrics\.jsonl$")),
    ("messages.jsonl", re.compile(r"(^|/)messages\.jsonl(\.\d+)?$")),
    ("logs", re.compile(r"\.log(\.\d+)?$")),
    ("databases", re.compile(r"\.db(-wal|-shm)?$")),
    ("checkpoints", re.compile(r"(^|/)checkpoint/")),
    ("published models", re.compile(r"round_\d+\.safetensors$")),
)
"""What each file is, by its path (the first that matches); the rest is "other"."""


def _disk_use_by_kind(root: Path) -> dict[str, int]:
    """Disk used under ``root`` (the whole soak folder but client data) per kind of file."""
    used = dict.fromkeys([kind for kind, _ in KINDS] + ["other"], 0)
    for path in root.rglob("*"):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("data/", "federation/tls/")):
            continue
        try:
            if not path.is_file() or path.is_symlink():
                continue
            size = path.stat().st_blocks * 512
        except OSError:
            continue
        kind = next((k for k, pattern in KINDS if pattern.search(relative)), "other")
        used[kind] += size
    return used


def _slope(points: list[tuple[int, int]]) -> float | None:
    """Least-squares growth of the second value per unit of the first; None: too few."""
    if len(points) < 3 or len({x for x, _ in points}) < 2:
        return None
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def report(
    soak: Soak, warm_up_s: float, events: Counter[str], leftovers: list[str], window: int
) -> dict:
    """The figures: rounds, events, and growth per 1,000 rounds after warm-up."""
    rounds = [s.round for s in soak.samples if s.round is not None]
    done = max(rounds) + 1 if rounds else 0
    born: dict[int, float] = {}
    lives: dict[int, list[tuple[float, int | None, str, int, int]]] = defaultdict(list)
    for s in soak.samples:
        for pid, (label, rss, fds) in s.processes.items():
            born.setdefault(pid, s.at_s)
            lives[pid].append((s.at_s, s.round, label, rss, fds))
    per_label: dict[str, dict[str, Any]] = {}
    for pid, life in lives.items():
        warm = [x for x in life if x[0] - born[pid] >= warm_up_s and x[1] is not None]
        label = life[0][2]
        entry = per_label.setdefault(
            label,
            {
                "processes": 0,
                "rss_mib": 0.0,
                "rss_mib_per_1000_rounds": None,
                "fitted_over_rounds": 0,
                "fds": 0,
                "fd_growth": 0,
                "fd_growth_late": None,
            },
        )
        entry["processes"] += 1
        entry["rss_mib"] = max(entry["rss_mib"], round(life[-1][3] / MIB, 1))
        entry["fds"] = max(entry["fds"], life[-1][4])
        if len(warm) >= 3:
            # The longest warm life of the label gives its growth: a life of a few rounds
            # between faults still holds the process's warm-up and says little of a leak.
            span = int(warm[-1][1] or 0) - int(warm[0][1] or 0)
            slope = _slope([(r, rss) for _, r, _, rss, _ in warm if r is not None])
            if slope is not None and span > entry["fitted_over_rounds"]:
                entry["rss_mib_per_1000_rounds"] = round(slope * 1000 / MIB, 2)
                entry["fitted_over_rounds"] = span
            entry["fd_growth"] = max(entry["fd_growth"], warm[-1][4] - warm[0][4])
            # A pool that fills after the warm-up (Flower's SQLAlchemy connections, a held
            # pull per SuperNode) is growth above, but no leak: past the first half of the
            # life, a leak still climbs over what the first half reached; a full pool does not.
            first_half = max(x[4] for x in warm[: len(warm) // 2 + 1])
            late = warm[-1][4] - first_half
            before = entry["fd_growth_late"]
            entry["fd_growth_late"] = late if before is None else max(before, late)
    files: dict[str, dict[str, Any]] = {}
    warm_samples = [s for s in soak.samples if s.at_s >= warm_up_s and s.round is not None]
    for name in soak.samples[-1].files:
        points = [(s.round, s.files.get(name, 0)) for s in warm_samples if s.round is not None]
        slope = _slope(points)
        after = _slope([(r, size) for r, size in points if r >= window])
        files[name] = {
            "mib": round(soak.samples[-1].files[name] / MIB, 2),
            "mib_per_1000_rounds": None if slope is None else round(slope * 1000 / MIB, 2),
            "mib_per_1000_rounds_after_window": None
            if after is None
            else round(after * 1000 / MIB, 2),
        }
    return {
        "minutes": round(soak.now() / 60, 1),
        "rounds": done,
        "faults": soak.faults,
        "rejoin_s": [round(t, 1) for t in soak.rejoins],
        "events": dict(events),
        "left_running_after_teardown": leftovers,  # of the processes ever sampled
        "processes": per_label,
        "files": files,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument(
        "--kill-every", type=float, default=180.0, help="seconds between faults (0: no faults)"
    )
    p.add_argument("--down", type=float, default=5.0, help="seconds a killed daemon stays down")
    p.add_argument("--sample-every", type=float, default=15.0)
    p.add_argument("--warm-up", type=float, default=60.0, help="seconds of a process's life")
    p.add_argument("--message-timeout", type=float, default=60.0)
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--json", type=Path, help="write the figures here too")
    p.add_argument("--graphs-keep-last", type=int, default=100, help="retention.graphs_keep_last")
    p.add_argument("--graphs-keep-every", type=int, default=50, help="retention.graphs_keep_every")
    args = p.parse_args()
    exit_on_sigterm()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="soak-"))
    overrides = [f"data.num_clients={args.clients}", "rounds=100000", "method=dpfl"]
    overrides += [
        f"retention.graphs_keep_last={args.graphs_keep_last}",
        f"retention.graphs_keep_every={args.graphs_keep_every}",
    ]
    config = load_config(None, overrides)
    spec = parse_method_spec("dpfl", config)
    files = write_client_files(config, work / "data")
    federation = LocalFederation(work / "federation", files, tls=True, runs_dir=work)
    run_id = f"soak-{int(time.time())}"
    with federation:
        options = RunOptions(
            expected_clients=args.clients,
            out_dir=str(work / "run"),
            message_timeout_s=args.message_timeout,
        )
        with federation.client() as client:
            client.create_run(run_id, spec.label, run_request(spec, options), out_claimed=True)
        soak = Soak(federation, run_id)
        clients = [n for n in federation.processes if n != "coordinator"]
        end = args.minutes * 60
        next_fault, turn = args.kill_every or float("inf"), 0
        big = {round(end / 2): ["coordinator"], round(end * 3 / 4): clients}
        if not args.kill_every:
            big.clear()  # --kill-every 0: no faults, every process lives the whole soak
        while soak.now() < end:
            soak.sample()
            print(f"{soak.now():7.0f} s  round {soak.samples[-1].round}", flush=True)
            if soak.now() >= next_fault:
                due = [at for at in big if at <= soak.now()]
                if due:
                    soak.kill(big.pop(due[0]), args.down)
                elif turn % 2:
                    soak.kill_supernode(clients[turn // 2 % len(clients)])
                else:
                    soak.kill([clients[turn // 2 % len(clients)]], args.down)
                turn += 0 if due else 1
                next_fault = soak.now() + args.kill_every
            time.sleep(max(0.0, min(args.sample_every, end - soak.now())))
        soak.sample()
        with federation.client() as client:
            client.stop_run(run_id)
    time.sleep(5.0)
    seen = {pid: label for s in soak.samples for pid, (label, _, _) in s.processes.items()}
    leftovers = sorted(f"{pid} {label}" for pid, label in seen.items() if _process(pid))
    figures = report(soak, args.warm_up, soak.events, leftovers, args.graphs_keep_last)
    figures["retention"] = config.retention.model_dump()
    figures["command"] = command_line()
    figures["environment"] = environment()
    rows = [
        [
            label,
            e["processes"],
            e["rss_mib"],
            e["rss_mib_per_1000_rounds"],
            e["fitted_over_rounds"],
            e["fds"],
            e["fd_growth"],
            e["fd_growth_late"],
        ]
        for label, e in sorted(figures["processes"].items())
    ]
    print(f"{figures['rounds']} rounds in {figures['minutes']} min; faults: {soak.faults}")
    print(f"events: {figures['events']}; left running: {leftovers or 'nothing'}")
    headers = [
        "process", "n", "RSS MiB", "MiB/1000 rounds", "over rounds", "fds", "fd growth",
        "late fd growth",
    ]  # fmt: skip
    print(format_table(headers, rows))
    print(format_table(
        ["file", "MiB", "MiB/1000 rounds", "after the window"],
        [
            [k, v["mib"], v["mib_per_1000_rounds"], v["mib_per_1000_rounds_after_window"]]
            for k, v in figures["files"].items()
        ],
    ))  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
