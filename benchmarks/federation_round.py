"""Where the time of a DPFL round goes in a real loopback federation, against Flower's floor.

Starts a coordinator and N client daemons as real processes (SuperLink behind the Fleet
gateway, SuperNodes, warm executors or Flower's process per message, peer gRPC servers),
runs DPFL in a setting where every steady round fetches peer models (IID data: the greedy
search keeps its Bc peers; under Dirichlet(0.1) the 4-client graph empties after round 0 and
a "DPFL round" would fetch nothing, so the benchmark fails if a steady round fetched
nothing), and splits each round's wall time into the slowest client's training, peer
fetch, selection (GGC without its fetches) and evaluation, and the rest: the overhead
(Flower messaging, the coordinator's own work between rounds). Each answered message's
timing (the run's messages.jsonl) splits the messaging further: getting the message to the
client and the work started, the client's work, and getting the reply back.

Beside it, the same machine runs Flower's floor: a minimal plain-Flower FedAvg app
(benchmarks/flower_floor/, no collabfl code) with the same number of SuperNodes, training
the same MLP for the same number of SGD steps per round. Also reported: launch → all
clients online, launch → first round done, and each client daemon's resident memory
(daemon, SuperNode and executor together) at its peak during the run and idle after it (a
warm executor loads torch and the ClientApp only once its SuperNode has joined, so before
the run it may not have loaded yet).

    python benchmarks/federation_round.py [--clients 4,16] [--rounds 5] [--partition iid]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from _common import exit_on_sigterm, format_table, median, write_results
from flower_floor import measure_flower_floor
from launch_phases import LaunchWatch

from collabfl.engine.config import ExperimentConfig, load_config
from collabfl.engine.methods import parse_method_spec, run_request
from collabfl.engine.report.run_dir import MESSAGES_FILE, read_run
from collabfl.engine.run_options import RunOptions
from collabfl.flower.processes import CLIENT_RUNTIMES
from collabfl.launcher.federation import LocalFederation, write_client_files

SPLIT = ("wall_s", "train_s", "peer_fetch_s", "selection_s", "evaluate_s", "overhead_s")
FETCHED = ("fetched_mb", "fetched_min_client_mb")
MESSAGE_SPLIT = ("messages", "to_client_s", "work_s", "to_coordinator_s")


def names(text: str, allowed: tuple[str, ...]) -> list[str]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    if not chosen or set(chosen) - set(allowed):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}")
    return chosen


def sizes(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of client counts") from None
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError("at least 2 clients")
    return counts


class MemoryWatch:
    """Samples each client daemon's process tree's resident memory (from /proc).

    One pass over /proc per sample serves every client: at 16 clients a pass per client took
    32 ms twice a second, about 6% of a core taken from the cores it measures.
    """

    def __init__(self, federation: LocalFederation, clients: int) -> None:
        self.pids = {k: federation.processes[f"client-{k}"].pid for k in range(clients)}
        self.peak = dict.fromkeys(self.pids, 0)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def now(self) -> dict[int, int]:
        by_root = tree_rss_bytes(self.pids.values())
        return {k: by_root[pid] for k, pid in self.pids.items()}

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> dict[int, int]:
        self.stopping.set()
        self.thread.join()
        return self.peak

    def _sample(self) -> None:
        while not self.stopping.wait(0.5):
            for k, rss in self.now().items():
                self.peak[k] = max(self.peak[k], rss)


def tree_rss_bytes(roots: Iterable[int]) -> dict[int, int]:
    """Resident memory of each root process and all its descendants, from one /proc pass."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
        except OSError:
            continue  # the process ended meanwhile
        pid = int(fields["Pid"])
        children.setdefault(int(fields["PPid"]), []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    totals = {}
    for root in roots:
        total, todo = 0, [root]
        while todo:
            pid = todo.pop()
            total += rss.get(pid, 0)
            todo.extend(children.get(pid, []))
        totals[root] = total
    return totals


def dpfl_config(
    clients: int, rounds: int, budget: int = 2, partition: str = "iid"
) -> tuple[ExperimentConfig, list[str]]:
    """The benchmark's DPFL setting (and its overrides, for the record)."""
    overrides = [
        f"data.num_clients={clients}",
        f"rounds={rounds}",
        f"dpfl.budget={budget}",
        f"data.partition={partition}",
        "data.num_train=4000",
        "data.num_test=2000",
        "epochs=1",
        "dpfl.init_epochs=2",
    ]
    return load_config(None, overrides), overrides


def run_federation(
    config: ExperimentConfig,
    clients: int,
    runtime: str,
    inspect: Callable[[Path], Any] | None = None,
) -> dict[str, Any]:
    """Run DPFL once on a fresh federation; its rows, message timings, launch and memory, and
    what ``inspect`` found in the federation's folder (its logs) before it was removed."""
    spec = parse_method_spec("dpfl", config)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_client_files(config, root / "data")
        launched = time.perf_counter()
        with (
            LaunchWatch(root / "work") as watch,
            LocalFederation(root / "work", files, runtime=runtime) as federation,
        ):
            online = time.perf_counter()
            watch.mark("all_online")
            memory = MemoryWatch(federation, clients)
            memory.start()
            with federation.client() as client:
                request = run_request(
                    spec, RunOptions(expected_clients=clients, out_dir=str(root / "out"))
                )
                client.create_run("bench", spec.label, request)
                watch.mark("run_created")
                first_round = None
                while True:
                    run = client.get_run("bench")
                    if first_round is None and run.last_completed_round is not None:
                        first_round = time.perf_counter()
                        watch.mark("first_round_done")
                        watch.take_cpu([p.pid for p in federation.processes.values()])
                    if not run.active:
                        break
                    time.sleep(0.1)
            peak = memory.stop()
            idle = memory.now()  # between runs, with everything loaded
            assert run.status == "finished", run.message
        messages = (root / "out" / "dpfl" / MESSAGES_FILE).read_text().splitlines()
        return {
            "inspected": None if inspect is None else inspect(root / "work"),
            "rows": read_run(root / "out" / "dpfl").rows,
            "messages": [json.loads(line) for line in messages],
            "launch_to_online_s": online - launched,
            "launch_to_first_round_s": (first_round or online) - launched,
            "launch_phases": watch.phases(),
            "launch_cpu_s": watch.cpu_s,
            "memory": {"idle_bytes": idle, "peak_bytes": peak},
        }


def round_split(rows: list[dict[str, Any]], round_index: int) -> dict[str, float]:
    """One round's wall time split into the clients' work (each part: its slowest client)
    and the overhead: the wall time minus the slowest client's whole work."""
    these = [r for r in rows if r["round"] == round_index]
    work = max(r["train_s"] + (r["collaborate_s"] or 0.0) + r["evaluate_s"] for r in these)
    fetch = max(r["fetch_s"] or 0.0 for r in these)
    collaborate = max(r["collaborate_s"] or 0.0 for r in these)
    train = max(r["train_s"] for r in these)
    evaluate = max(r["evaluate_s"] for r in these)
    wall = these[0]["round_s"]
    return {
        "wall_s": wall,
        "train_s": train,
        "peer_fetch_s": fetch,
        "selection_s": collaborate - fetch,
        "evaluate_s": evaluate,
        "overhead_s": wall - work,
    }


def fetched(rows: list[dict[str, Any]], round_index: int) -> dict[str, float]:
    """Peer model bytes the round fetched (MB): all clients together, and its least-fetching
    client (0: a client that collaborated with nobody)."""
    these = [r["bytes_fetched"] for r in rows if r["round"] == round_index]
    return {"fetched_mb": sum(these) / 1e6, "fetched_min_client_mb": min(these) / 1e6}


def check_steady_rounds_fetch(per_round: list[dict[str, Any]], clients: int) -> None:
    """Fail loudly when a steady round fetched no peer model: its figures would be a Local
    round's, not DPFL's."""
    empty = [r["round"] for r in per_round[1:] if r["fetched_mb"] == 0]
    if empty:
        raise SystemExit(
            f"federation_round: {clients} clients, steady round(s) {empty} fetched no peer "
            "model, so they do not measure a DPFL round; choose a partition or budget where "
            "the greedy search keeps peers (--partition iid)"
        )


def message_split(messages: list[dict[str, Any]], round_index: int) -> dict[str, float]:
    """The round's messages: how many, and the slowest round trip's parts."""
    these = [m for m in messages if m["round"] == round_index]
    slowest = max(these, key=lambda m: m["round_trip_s"])
    return {"messages": len(these), **{k: slowest[k] for k in MESSAGE_SPLIT[1:]}}


def measure(config: ExperimentConfig, clients: int, rounds: int, runtime: str) -> dict[str, Any]:
    """Run one runtime, print its table, and return its figures."""
    run = run_federation(config, clients, runtime)
    per_round = [
        {
            "round": t,
            **round_split(run["rows"], t),
            **fetched(run["rows"], t),
            **message_split(run["messages"], t),
        }
        for t in range(rounds)
    ]
    steady = per_round[1:]
    figures = {
        "launch_to_online_s": run["launch_to_online_s"],
        "launch_to_first_round_s": run["launch_to_first_round_s"],
        "launch_phases": run["launch_phases"],
        "launch_cpu_s": run["launch_cpu_s"],
        "rounds": per_round,
        "steady_median": {
            k: median([r[k] for r in steady]) for k in (*SPLIT, *FETCHED, *MESSAGE_SPLIT)
        },
        "memory_per_client_mb": {
            "idle_median": median(list(run["memory"]["idle_bytes"].values())) / 2**20,
            "round_peak_median": median(list(run["memory"]["peak_bytes"].values())) / 2**20,
        },
    }
    headers = ["round", "wall", "train", "fetch", "select", "eval", "overhead", "msgs"]
    headers += ["to", "work", "MB fetched", "min/client"]
    table = [
        [
            r["round"],
            *(f"{r[k]:.2f}" for k in SPLIT),
            r["messages"],
            f"{r['to_client_s'] + r['to_coordinator_s']:.2f}",
            f"{r['work_s']:.2f}",
            f"{r['fetched_mb']:.2f}",
            f"{r['fetched_min_client_mb']:.2f}",
        ]
        for r in per_round
    ]
    print(f"\n== {clients} clients, runtime {runtime}")
    print(format_table(headers, table))
    print("(to: the slowest message's delivery + start + return; work: its client work)")
    print(f"launch → all online: {figures['launch_to_online_s']:.1f} s")
    print(f"launch → first round done: {figures['launch_to_first_round_s']:.1f} s")
    phases = [[p["phase"], f"{p['at_s']:.2f}", f"{p['step_s']:.2f}"] for p in run["launch_phases"]]
    print(format_table(["launch phase", "at s", "step s"], phases))
    cpu = {k: round(v, 2) for k, v in run["launch_cpu_s"].items()}
    print(f"CPU s until the first round, by process ({sum(cpu.values()):.1f} in all):", cpu)
    print("steady-state medians (rounds ≥ 1):", json.dumps(figures["steady_median"], indent=1))
    print("memory per client daemon (MiB):", json.dumps(figures["memory_per_client_mb"]))
    return figures


LAUNCH = ("launch_to_online_s", "launch_to_first_round_s")


def launch_figures(figures: dict[str, Any]) -> dict[str, Any]:
    """One federation's launch: totals, phases and CPU by process."""
    return {k: figures[k] for k in (*LAUNCH, "launch_phases", "launch_cpu_s")}


def launch_median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeated federations: totals, each phase's time from launch (phases
    seen in every run) and CPU seconds by process until the first round."""
    phases = [{p["phase"]: p["at_s"] for p in r["launch_phases"]} for r in runs]
    common = [p for p in phases[0] if all(p in seen for seen in phases)]
    roles = runs[0]["launch_cpu_s"]
    return {
        **{k: median([r[k] for r in runs]) for k in LAUNCH},
        "phase_at_s": {p: median([seen[p] for seen in phases]) for p in common},
        "cpu_s": {k: median([r["launch_cpu_s"][k] for r in runs]) for k in roles},
        "cpu_total_s": median([sum(r["launch_cpu_s"].values()) for r in runs]),
    }


def check_fetches(result: dict[str, Any], clients: int, runtimes: list[str]) -> None:
    """Every runtime's steady rounds fetched peer models (after the figures are written)."""
    for runtime in runtimes:
        check_steady_rounds_fetch(result[runtime]["rounds"], clients)


def train_samples(config: ExperimentConfig, clients: int) -> int:
    """Training samples of an average DPFL client (the floor's clients get as many)."""
    return round(config.data.num_train * (1 - config.data.val_fraction) / clients)


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=sizes, default=[4], help="client counts: 4,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=2)
    parser.add_argument(
        "--partition",
        default="iid",
        help="data.partition (iid: every steady round fetches Bc peers at 4 and 16 clients)",
    )
    parser.add_argument(
        "--runtime", type=lambda t: names(t, CLIENT_RUNTIMES), default=["warm"], help="a,b"
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the plain-Flower floor")
    parser.add_argument(
        "--repeat", type=int, default=1, help="federations per runtime (launch medians)"
    )
    parser.add_argument("--name", default="federation_round", help="results/<name>.json")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be >= 2 (round 0 is set-up; steady rounds follow)")
    figures: dict[str, Any] = {}
    for clients in args.clients:
        config, overrides = dpfl_config(clients, args.rounds, args.budget, args.partition)
        result: dict[str, Any] = {"overrides": overrides}
        for runtime in args.runtime:
            runs = [measure(config, clients, args.rounds, runtime) for _ in range(args.repeat)]
            result[runtime] = {**runs[0], "launch_median": launch_median(runs)}
            if args.repeat > 1:
                result[runtime]["repeats"] = [launch_figures(r) for r in runs]
                print("launch medians:", json.dumps(result[runtime]["launch_median"]))
        if not args.no_floor:
            result.update(floor_figures(config, clients, args.rounds, args.runtime, result))
        figures[f"{clients}_clients"] = result
        # Written after every size: a later failure keeps what was measured.
        path = write_results(args.name, figures, vars(args))
        print(f"wrote {path}")
        check_fetches(result, clients, args.runtime)


def floor_figures(
    config: ExperimentConfig,
    clients: int,
    rounds: int,
    runtimes: list[str],
    result: dict[str, Any],
) -> dict[str, Any]:
    """Flower's floor with as many SuperNodes, and each runtime's round time over it; a
    floor that fails is recorded as such (on a small machine Flower's process per message
    can miss its own deadlines at 16 SuperNodes)."""
    samples = train_samples(config, clients)
    steps = math.ceil(config.epochs * samples / config.training.batch_size)
    print(f"\n== Flower's floor, {clients} SuperNodes, FedAvg, {steps} SGD steps/round")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            floor = measure_flower_floor(clients, rounds, steps, Path(tmp), samples=samples)
    except (RuntimeError, TimeoutError) as error:
        print(f"the floor did not complete: {error}")
        return {"flower_floor": {"error": str(error), "steps": steps}}
    floor_round = floor["steady_median"]["wall_s"]
    ratios = {rt: result[rt]["steady_median"]["wall_s"] / floor_round for rt in runtimes}
    print(f"steady round: {floor_round:.2f} s; DPFL / floor:", ratios)
    return {"flower_floor": floor, "ratio_to_floor": ratios}


if __name__ == "__main__":
    main()
