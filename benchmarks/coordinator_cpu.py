"""What the coordinator side costs per participant: CPU per client-round of each process.

Starts a real loopback federation (as benchmarks/federation_round.py does: one coordinator
daemon, N client daemons), runs DPFL in a setting where every steady round fetches peer
models, and reads the CPU time (user + system, /proc/PID/stat) of every process of the
coordinator's tree when round ``--warmup`` has completed and again ``--rounds`` rounds
later: the SuperLink, the coordinator daemon (its gRPC service, Fleet gateway, run and
ServerApp launchers, the run's log follower), the run's ServerApp and, in a ``--baseline``
tree from before the daemon followed logs itself, its ``flwr log`` process. Each figure is CPU
milliseconds per client and round; the total is the coordinator side's cost of one more
participant. The launcher polls the run's status only every ``POLL_S`` (an operator watching,
a few milliseconds a call; it counts against the daemon).

With ``--baseline REV`` each repetition runs REV's tree (``git archive`` into a temporary
folder, on PYTHONPATH: every daemon of that side imports it) right after this tree's, and
the two runs' per-client results must agree as the runtime equality tests require.
Before the run, with every node online, the coordinator side's idle cost is read over
``--idle-s`` seconds: what one connected participant costs it per second with no run.
With ``--profile`` py-spy samples each coordinator-side process over the steady rounds and
the self time is split into ours (collabfl), Flower's (flwr) and the libraries under them.
With ``--superlink-state disk,memory`` each repetition runs this tree once per SuperLink state
named, given to the daemon as ``--superlink-state``: ``disk`` is SQLite in its state dir,
``memory`` (the daemon's default) Flower's in-memory state, no SQLAlchemy. With both named,
the memory side's per-client results must agree with the disk side's
(``results_agree_with_baseline``). The federation is insecure unless ``--transport`` is
given: without TLS no SuperNode key is registered, so a restart's re-registration is not
part of what it measures.
With ``--transport rest,grpc`` each repetition runs this tree once per Fleet transport, with
TLS and SuperNode authentication: ``rest`` through the Fleet gateway as participants connect
today, ``grpc`` with each SuperNode on Flower's gRPC-rere Fleet API straight to the SuperLink
(benchmarks/grpc_fleet.py: Flower's SuperNode has no gRPC client, so it is patched in there);
the gateway's share of the daemon is read from its thread (``fleet-gateway``), and the
gRPC side's per-client results must agree with the REST side's.

    python benchmarks/coordinator_cpu.py [--clients 4,16] [--rounds 5] [--baseline REV]
        [--superlink-state disk,memory] [--transport rest,grpc] [--repeat 1] [--profile DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import exit_on_sigterm, export_tree, format_table, median, write_results

if TYPE_CHECKING:
    from collabfl.kernel.ports import PortReservation

IDLE_SETTLE_S = 5.0
"""How long a federation whose nodes are all online settles before its idle cost is read."""
POLL_S = 0.25
"""How often the run's status is asked (each call costs the coordinator daemon ~1 ms)."""
ROLES = ("superlink", "daemon", "serverapp", "log_follower", "other")
OWNERS = (
    "collabfl", "flwr", "sqlalchemy", "grpc", "httpx", "httpcore", "h11", "h2", "google",
    "fastapi", "starlette", "uvicorn", "anyio", "pydantic", "threading", "selectors", "queue",
    "concurrent", "asyncio", "logging", "json", "ssl", "socket",
)  # fmt: skip
"""The code a profile's self time is split into (the first that a frame's file matches)."""
PROFILE_RATE = 97
"""py-spy samples per second (prime: no lock-step with the round's timers)."""


def role(cmdline: list[str]) -> str:
    """Which coordinator-side process a command line is."""
    text = " ".join(cmdline)
    if "flower-superlink" in text or "owner_gated_superlink" in text:
        return "superlink"
    if "collabfl.coordinator.daemon" in text or "grpc_fleet.py coordinator" in text:
        return "daemon"
    if "flwr-serverapp" in text or "serverapp_template" in text:
        return "serverapp"  # the template and the ServerApps it forks (their command lines)
    if "flwr" in text and " log " in f" {text} ":
        return "log_follower"
    return "other"


def process_tree(root: int) -> dict[int, list[str]]:
    """Every live process under ``root`` (itself included) with its command line."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        tree[pid] = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
        todo.extend(children.get(pid, []))
    return tree


def cpu_seconds(pid: int) -> float:
    """CPU seconds of one process: its threads' and those of the children it reaped (a
    ``flwr`` command the coordinator ran counts as the coordinator's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every process under it (``cpu_seconds`` of each)."""
    total = 0.0
    for pid in process_tree(root):
        with contextlib.suppress(OSError):  # ended meanwhile
            total += cpu_seconds(pid)
    return total


def snapshot(root: int) -> dict[int, tuple[str, float]]:
    taken = {}
    for pid, cmdline in process_tree(root).items():
        try:
            taken[pid] = (role(cmdline), cpu_seconds(pid))
        except OSError:
            continue  # ended meanwhile
    return taken


def by_role(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds each role used between two snapshots (a process new since ``before``
    counts from zero; one that ended meanwhile is lost, and said so by the caller)."""
    used = dict.fromkeys(ROLES, 0.0)
    for pid, (name, cpu) in after.items():
        used[name] += cpu - before.get(pid, (name, 0.0))[1]
    return used


class Profiler:
    """py-spy attached to each coordinator-side process over the steady rounds."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.running: list[tuple[str, Path, subprocess.Popen[bytes]]] = []

    def start(self, processes: dict[int, tuple[str, float]], seconds: float) -> None:
        spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
        self.out.mkdir(parents=True, exist_ok=True)
        for pid, (name, _) in processes.items():
            if name == "other":
                continue
            raw = self.out / f"{name}-{pid}.txt"
            command = [
                spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(PROFILE_RATE),
                "--duration", str(int(seconds) + 1), "--nonblocking", "--output", str(raw),
            ]  # fmt: skip
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.running.append((name, raw, process))

    def stop(self) -> dict[str, Any]:
        """Per role: samples, the split of self time by owner, and the top own frames."""
        for _, _, process in self.running:
            process.send_signal(2)  # SIGINT: py-spy writes what it has
        profiles: dict[str, Any] = {}
        for name, raw, process in self.running:
            process.wait(timeout=60)
            if raw.exists():
                profiles.setdefault(name, Counter()).update(read_raw(raw))
        return {name: summarize(stacks) for name, stacks in profiles.items()}


def read_raw(path: Path) -> Counter[str]:
    """py-spy's raw (collapsed) output: ``frame;frame;... count`` per line."""
    stacks: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    return stacks


def owner(frame: str) -> str:
    """Whose code a frame is: ours, Flower's, or the library it names (py-spy names a frame's
    file by its module path: ``flwr/server/x.py``)."""
    location = "/" + frame[frame.rfind("(") + 1 : frame.rfind(")")]
    for name in OWNERS:
        if f"/{name}/" in location or f"/{name}." in location:
            return name
    if "sqlite3" in location:
        return "sqlite3"
    return "python/other"


def summarize(stacks: Counter[str], top: int = 15) -> dict[str, Any]:
    """Self time by owner (share of samples) and the top frames by inclusive samples that are
    ours or Flower's (where to cut)."""
    total = sum(stacks.values())
    self_by_owner: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split(";")
        self_by_owner[owner(frames[-1])] += count
        for frame in set(frames):
            if owner(frame) in ("collabfl", "flwr"):
                inclusive[frame] += count
    return {
        "samples": total,
        "self_share_by_owner": {k: round(v / total, 3) for k, v in self_by_owner.most_common()},
        "top_inclusive": [(f, round(c / total, 3)) for f, c in inclusive.most_common(top)],
    }


RESULT_KEYS = ("round", "client", "best_test_acc", "test_acc", "val_acc", "val_loss")
RESULT_COUNTS = ("num_collaborators", "bytes_fetched", "coordinator_bytes")
"""What the runtime equality tests compare of each row (tests/support/runtime_equality.py)."""


def client_figures(run_dir: Path) -> list[dict[str, Any]]:
    """The run's per-client, per-round results that the equality tests compare."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: r[k] for k in (*RESULT_KEYS, *RESULT_COUNTS)} for r in rows if r]


def differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The pairs of rows on which two runs disagree (``same_results``), to say what differed;
    where one run lacks rows, which (round, client) rows each lacks."""
    if len(a) != len(b):
        keys_a = {(r["round"], r["client"]) for r in a}
        keys_b = {(r["round"], r["client"]) for r in b}
        return [
            [
                {"rows": len(a), "lacks": sorted(keys_b - keys_a)},
                {"rows": len(b), "lacks": sorted(keys_a - keys_b)},
            ]
        ]
    return [[x, y] for x, y in zip(a, b, strict=True) if not same_results([x], [y])]


def said(events: list[dict[str, Any]]) -> str:
    """A run's warning events in a line: each kind, with its (round, client) pairs and its
    first message."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        kinds.setdefault(event["kind"], []).append(event)
    return "; ".join(
        f"{kind} at {[(e['round'], e['client']) for e in listed]}: {listed[0]['message']}"
        for kind, listed in kinds.items()
    )


def same_results(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """The two runs' rows agree as the equality tests require (accuracies to 1e-9, the
    validation loss to 1e-5 relative, counts exactly)."""

    def agree(x: dict[str, Any], y: dict[str, Any]) -> bool:
        return (
            all(x[k] == y[k] for k in ("round", "client", *RESULT_COUNTS))
            and all(math.isclose(x[k], y[k], abs_tol=1e-9) for k in RESULT_KEYS[2:5])
            and math.isclose(x["val_loss"], y["val_loss"], rel_tol=1e-5)
        )

    return len(a) == len(b) and all(agree(x, y) for x, y in zip(a, b, strict=True))


def on_superlink_state(superlink_state: str) -> None:
    """Start this process's federations' coordinators with ``--superlink-state``."""
    from collabfl.launcher import federation

    default = federation.coordinator_command

    def command(*args: Any, **kwargs: Any) -> list[str]:
        return [*default(*args, **kwargs), "--superlink-state", superlink_state]

    federation.coordinator_command = command


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each named thread of a process (``comm``; threads sharing a name add
    up): how the coordinator daemon's time splits between its gateway and the rest."""
    used: dict[str, float] = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text.rsplit(")", 1)[1].split()
            used[name] = used.get(name, 0.0) + sum(int(f) for f in fields[11:13]) / os.sysconf(
                "SC_CLK_TCK"
            )
    return used


def on_transport(transport: str, work_dir: Path) -> PortReservation:
    """Start this process's federations' daemons through benchmarks/grpc_fleet.py: the
    coordinator with its threads named (both transports), and for ``grpc`` its SuperLink
    serving gRPC-rere Fleet on a port of its own (reserved while the caller holds the
    result), dialled straight by the SuperNodes."""
    from grpc_fleet import GRPC_FLEET_ENV, SUPERLINK_CA_ENV

    from collabfl.kernel.ports import PortReservation
    from collabfl.launcher import federation

    wrapper = str(Path(__file__).with_name("grpc_fleet.py"))
    coordinator, client = federation.coordinator_command, federation.client_command

    def coordinator_command(*args: Any, **kwargs: Any) -> list[str]:
        return [sys.executable, wrapper, "coordinator", *coordinator(*args, **kwargs)[3:]]

    def client_command(*args: Any, **kwargs: Any) -> list[str]:
        return [sys.executable, wrapper, "client", *client(*args, **kwargs)[3:]]

    federation.coordinator_command = coordinator_command
    fleet = PortReservation(1 if transport == "grpc" else 0)
    if transport == "grpc":
        os.environ[GRPC_FLEET_ENV] = f"127.0.0.1:{fleet.ports[0]}"
        os.environ[SUPERLINK_CA_ENV] = str(work_dir / "coordinator/superlink_tls/ca.pem")
        federation.client_command = client_command
    return fleet


def measure(
    clients: int,
    warmup: int,
    rounds: int,
    idle_s: float,
    profile_dir: Path | None,
    superlink_state: str = "",
    transport: str = "",
) -> dict[str, Any]:
    """One side, one size: the coordinator tree's CPU over ``idle_s`` with every node
    online and no run, then over ``rounds`` steady rounds of a run; ``superlink_state``:
    the daemon's ``--superlink-state`` (empty: its default, e.g. a baseline's);
    ``transport``: ``rest`` (through the gateway) or ``grpc`` (straight to the SuperLink),
    both with TLS and SuperNode authentication (empty: insecure REST, as before)."""
    from collabfl.engine.config import load_config
    from collabfl.engine.methods import parse_method_spec, run_request
    from collabfl.engine.run_options import RunOptions
    from collabfl.launcher.federation import LocalFederation, write_client_files

    if superlink_state:
        on_superlink_state(superlink_state)

    total_rounds = warmup + rounds + 1  # one more: the last measured round is not the last
    overrides = [
        f"data.num_clients={clients}",
        f"rounds={total_rounds}",
        "dpfl.budget=2",
        "data.partition=iid",
        "data.num_train=4000",
        "data.num_test=2000",
        "epochs=1",
        "dpfl.init_epochs=2",
    ]
    config = load_config(None, overrides)
    spec = parse_method_spec("dpfl", config)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_client_files(config, root / "data")
        fleet = on_transport(transport, root / "work") if transport else contextlib.nullcontext()
        with (
            fleet,
            LocalFederation(root / "work", files, tls=bool(transport)) as federation,
            federation.client() as client,
        ):
            coordinator = federation.processes["coordinator"].pid
            time.sleep(IDLE_SETTLE_S)
            idle_before = snapshot(coordinator)
            time.sleep(idle_s)
            idle = by_role(idle_before, snapshot(coordinator))
            client.create_run(
                "bench",
                spec.label,
                run_request(spec, RunOptions(expected_clients=clients, out_dir=str(root / "out"))),
            )

            def reached(target: int) -> float:
                while True:
                    run = client.get_run("bench")
                    done = run.last_completed_round
                    if done is not None and done >= target:
                        return time.perf_counter()
                    if not run.active:
                        raise SystemExit(f"coordinator_cpu: run ended early: {run.message}")
                    time.sleep(POLL_S)

            reached(warmup - 1)
            threads_before = thread_cpu_seconds(coordinator)
            started, before = time.perf_counter(), snapshot(coordinator)
            profiler = Profiler(profile_dir) if profile_dir else None
            if profiler:
                profiler.start(before, 3600)
            reached(warmup - 1 + rounds)
            wall, after = time.perf_counter() - started, snapshot(coordinator)
            threads_after = thread_cpu_seconds(coordinator)
            databases = [
                cmdline[cmdline.index("--database") + 1]
                for cmdline in process_tree(coordinator).values()
                if role(cmdline) == "superlink" and "--database" in cmdline
            ]
            profiles = profiler.stop() if profiler else None
            lost = sorted(pid for pid in before if pid not in after)
            while client.get_run("bench").active:
                time.sleep(POLL_S)
            warnings = [
                {"kind": e.kind, "round": e.round, "client": e.client_id, "message": e.message}
                for e in client.list_events("bench")
                if e.level != "info" and e.kind != "undeclared_sizes"  # the benchmark declares none
            ]
        figures = client_figures(root / "out" / "dpfl")
    used = by_role(before, after)
    per = {k: 1000 * v / (clients * rounds) for k, v in used.items()}
    threads = {k: v - threads_before.get(k, 0.0) for k, v in threads_after.items()}
    return {
        "clients": clients,
        "superlink_state": superlink_state,
        "transport": transport,
        "daemon_threads_cpu_s": threads,
        "gateway_ms_per_client_round": 1000
        * threads.get("fleet-gateway", 0.0)
        / (clients * rounds),
        "superlink_database": databases,
        "steady_rounds": rounds,
        "wall_s": wall,
        "round_s": wall / rounds,
        "cpu_s": used,
        "ms_per_client_round": per,
        "total_ms_per_client_round": sum(per.values()),
        "idle_ms_per_s": {k: 1000 * v / idle_s for k, v in idle.items()},
        "idle_total_ms_per_node_s": 1000 * sum(idle.values()) / idle_s / clients,
        "processes": {pid: name for pid, (name, _) in after.items()},
        "ended_during_window": lost,
        "profile": profiles,
        "client_figures": figures,
        "warning_events": warnings,
    }


def run_side(
    pythonpath: Path | None,
    clients: int,
    args: argparse.Namespace,
    profile_dir: Path | None,
    superlink_state: str = "",
    transport: str = "",
) -> dict[str, Any]:
    """This script's ``--one`` mode in a fresh interpreter (with ``pythonpath``'s collabfl)."""
    command = [
        sys.executable, __file__, "--one", str(clients), "--warmup", str(args.warmup),
        "--rounds", str(args.rounds), "--idle-s", str(args.idle_s),
        "--one-superlink-state", superlink_state, "--one-transport", transport,
    ]  # fmt: skip
    if profile_dir:
        command += ["--profile-dir", str(profile_dir)]
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"coordinator_cpu: a {clients}-client side failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def sizes(text: str) -> list[int]:
    counts = [int(n) for n in text.split(",")]
    if min(counts) < 2:
        raise argparse.ArgumentTypeError("at least 2 clients")
    return counts


def states(text: str) -> list[str]:
    named = text.split(",")
    if not named or set(named) - {"disk", "memory"} or len(set(named)) != len(named):
        raise argparse.ArgumentTypeError(f"{text!r}: name disk and/or memory, each once")
    return named


def transports(text: str) -> list[str]:
    named = text.split(",")
    if not named or set(named) - {"rest", "grpc"} or len(set(named)) != len(named):
        raise argparse.ArgumentTypeError(f"{text!r}: name rest and/or grpc, each once")
    return named


def rounded(figures: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in figures.items()}


def summary_row(side: str, clients: int, runs: list[dict[str, Any]]) -> list[str]:
    cells = [median([r["ms_per_client_round"][k] for r in runs]) for k in ROLES]
    total = median([r["total_ms_per_client_round"] for r in runs])
    wall = median([r["round_s"] for r in runs])
    idle = median([r["idle_total_ms_per_node_s"] for r in runs])
    gateway = median([r.get("gateway_ms_per_client_round", 0.0) for r in runs])
    return [
        side, str(clients), *(f"{c:.1f}" for c in cells), f"{gateway:.1f}", f"{total:.1f}",
        f"{wall:.2f}", f"{idle:.1f}",
    ]  # fmt: skip


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=sizes, default=[4, 16])
    parser.add_argument("--warmup", type=int, default=2, help="rounds before measuring (>= 1)")
    parser.add_argument("--rounds", type=int, default=5, help="steady rounds measured")
    parser.add_argument(
        "--idle-s", type=float, default=15.0, help="seconds of idle cost measured first"
    )
    parser.add_argument("--baseline", help="git revision to run beside this tree")
    parser.add_argument(
        "--superlink-state",
        type=states,
        help="run this tree once per SuperLink state named (disk,memory) instead of new",
    )
    parser.add_argument(
        "--transport",
        type=transports,
        help="run this tree once per Fleet transport named (rest,grpc), with TLS and "
        "SuperNode authentication, instead of new (insecure REST)",
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy each process; raw profiles in DIR"
    )
    parser.add_argument("--name", default="coordinator_cpu", help="results/<name>.json")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--one-superlink-state", default="", help=argparse.SUPPRESS)
    parser.add_argument("--one-transport", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warmup < 1 or args.rounds < 1:
        parser.error("--warmup and --rounds must be >= 1")
    if sum(map(bool, (args.baseline, args.superlink_state, args.transport))) > 1:
        parser.error("--baseline, --superlink-state and --transport: give one of them")
    if args.one:
        result = measure(
            args.one,
            args.warmup,
            args.rounds,
            args.idle_s,
            args.profile_dir,
            args.one_superlink_state,
            args.one_transport,
        )
        print(json.dumps(result))
        return
    figures: dict[str, Any] = {}
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        baseline = export_tree(args.baseline, Path(tmp) / "baseline") if args.baseline else None
        for clients in args.clients:
            named = args.superlink_state or args.transport or ["new"]
            sides: dict[str, list[dict[str, Any]]] = {side: [] for side in named}
            if baseline:
                sides["baseline"] = []
            for rep in range(args.repeat):
                for side in sides:
                    spy = args.profile / f"{side}-{clients}-{rep}" if args.profile else None
                    path = baseline if side == "baseline" else None
                    state = side if side in ("disk", "memory") else ""
                    transport = side if side in ("rest", "grpc") else ""
                    load = os.getloadavg()
                    result = run_side(path, clients, args, spy, state, transport)
                    result["load_average_before"] = list(load)
                    result["load_average_after"] = list(os.getloadavg())
                    print(
                        f"{clients} clients, {side}: "
                        f"{result['total_ms_per_client_round']:.1f} ms/client-round "
                        f"(gateway {result['gateway_ms_per_client_round']:.1f}) "
                        f"{json.dumps(rounded(result['ms_per_client_round']))}"
                        f" load {load[0]:.1f}",
                        flush=True,
                    )
                    if result["warning_events"]:  # what the run said of rows it lacks
                        print(f"  warnings: {said(result['warning_events'])}", flush=True)
                    sides[side].append(result)
            same, differed = None, []
            pair = ("new", "baseline") if baseline else ("memory", "disk")
            if args.transport:
                pair = ("grpc", "rest")
            if all(side in sides for side in pair):
                differed = [
                    differences(new["client_figures"], old["client_figures"])
                    for new, old in zip(sides[pair[0]], sides[pair[1]], strict=True)
                ]
                same = not any(differed)
            for runs in sides.values():
                for r in runs:
                    r.pop("client_figures")
            figures[f"{clients}_clients"] = {
                **{
                    side: {
                        "runs": runs,
                        "median_total_ms_per_client_round": median(
                            [r["total_ms_per_client_round"] for r in runs]
                        ),
                        "median_idle_total_ms_per_node_s": median(
                            [r["idle_total_ms_per_node_s"] for r in runs]
                        ),
                        "median_ms_per_client_round": {
                            k: median([r["ms_per_client_round"][k] for r in runs]) for k in ROLES
                        },
                        "median_gateway_ms_per_client_round": median(
                            [r["gateway_ms_per_client_round"] for r in runs]
                        ),
                    }
                    for side, runs in sides.items()
                },
                "results_agree_with_baseline": same,
                "differing_rows_per_pair": differed,
            }
            table += [summary_row(side, clients, runs) for side, runs in sides.items()]
            settings = vars(args) | {
                "poll_s": POLL_S,
                "profile": args.profile and str(args.profile),
            }
            path = write_results(args.name, figures, settings)
            if same is False:
                raise SystemExit(
                    f"coordinator_cpu: {clients} clients: results differ from the baseline's"
                )
    headers = ["side", "clients", *ROLES, "of it gateway", "total ms", "round s"]
    headers.append("idle ms/node-s")
    print(format_table(headers, table))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
