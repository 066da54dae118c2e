"""Where the time of a DPFL round goes in a real loopback federation, per client runtime.

Starts a coordinator and N client daemons as real processes (SuperLink, SuperNodes, peer
gRPC servers), runs DPFL, and splits each round's wall time into client training, peer
fetch, selection (GGC without its fetches) and evaluation — the slowest client of each,
since clients work in parallel — and the rest, which is Flower messaging (polling waits,
ClientApp start-up per message in the ``subprocess`` runtime, state load/save). Also
reports the time from launching the processes to the first completed round.

With several ``--runtime`` values (the client daemons' ``--runtime``) the same federation
runs once per runtime, one after the other, and the steady-state medians are compared.

    python benchmarks/federation_round.py [--clients 4] [--rounds 4] [--runtime subprocess,warm]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import format_table, median, write_results

from collabfl.coordinator.config import ExperimentConfig, load_config
from collabfl.coordinator.federation import LocalFederation, write_client_files
from collabfl.coordinator.methods import parse_method_spec, run_request
from collabfl.coordinator.report.run_dir import read_run
from collabfl.coordinator.run_options import RunOptions
from collabfl.flower.processes import CLIENT_RUNTIMES

COMPARED = ("wall_s", "flower_messaging_s")
"""The steady-state medians compared between runtimes (the rest is the same work)."""


def runtimes(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CLIENT_RUNTIMES))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"runtimes are {', '.join(CLIENT_RUNTIMES)}")
    return names


def run_federation(config: ExperimentConfig, clients: int, runtime: str) -> dict[str, Any]:
    """Run DPFL once on a fresh federation; its rows and launch timings."""
    spec = parse_method_spec("dpfl", config)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_client_files(config, root / "data")
        launched = time.perf_counter()
        with LocalFederation(root / "work", files, runtime=runtime) as federation:
            online = time.perf_counter()
            with federation.client() as client:
                request = run_request(spec, RunOptions(clients, out_dir=str(root)))
                client.create_run("bench", spec.label, request)
                first_round = None
                while True:
                    run = client.get_run("bench")
                    if first_round is None and run.last_completed_round is not None:
                        first_round = time.perf_counter()
                    if not run.active:
                        break
                    time.sleep(0.2)
            assert run.status == "finished", run.message
        return {
            "rows": read_run(root / "dpfl").rows,
            "launch_to_online_s": online - launched,
            "launch_to_first_round_s": (first_round or online) - launched,
        }


def round_split(rows: list[dict[str, Any]], round_index: int) -> dict[str, float]:
    """One round's wall time split into the slowest client's work and the messaging."""
    these = [r for r in rows if r["round"] == round_index]
    wall = these[0]["round_s"]
    train = max(r["train_s"] for r in these)
    fetch = max(r["fetch_s"] for r in these)
    collaborate = max(r["collaborate_s"] for r in these)
    evaluate = max(r["evaluate_s"] for r in these)
    return {
        "round": round_index,
        "wall_s": wall,
        "train_s": train,
        "peer_fetch_s": fetch,
        "selection_s": collaborate - fetch,
        "evaluate_s": evaluate,
        "flower_messaging_s": wall - train - collaborate - evaluate,
    }


def measure(config: ExperimentConfig, clients: int, rounds: int, runtime: str) -> dict[str, Any]:
    """Run one runtime, print its table, and return its figures."""
    run = run_federation(config, clients, runtime)
    per_round = [round_split(run["rows"], t) for t in range(rounds)]
    steady = per_round[1:] or per_round
    figures = {
        "launch_to_online_s": run["launch_to_online_s"],
        "launch_to_first_round_s": run["launch_to_first_round_s"],
        "rounds": per_round,
        "steady_median": {k: median([r[k] for r in steady]) for k in steady[0] if k != "round"},
    }
    table = [[r["round"], *(f"{v:.2f}" for k, v in r.items() if k != "round")] for r in per_round]
    print(f"\n== runtime: {runtime}")
    print(format_table(["round", "wall", "train", "fetch", "select", "eval", "flower"], table))
    print(f"launch → all online: {figures['launch_to_online_s']:.1f} s")
    print(f"launch → first round done: {figures['launch_to_first_round_s']:.1f} s")
    print("steady-state median (rounds ≥ 1):", json.dumps(figures["steady_median"], indent=1))
    return figures


def compare(by_runtime: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each runtime's steady-state medians relative to the first runtime's."""
    names = list(by_runtime)
    base = by_runtime[names[0]]["steady_median"]
    ratios = {
        name: {k: by_runtime[name]["steady_median"][k] / base[k] for k in COMPARED}
        for name in names[1:]
    }
    rows = [
        [name, *(f"{by_runtime[name]['steady_median'][k]:.2f}" for k in COMPARED)] for name in names
    ]
    print("\n== steady-state medians (s)")
    print(format_table(["runtime", *COMPARED], rows))
    for name, ratio in ratios.items():
        shown = ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items())
        print(f"{name} / {names[0]}: {shown}")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--budget", type=int, default=2)
    parser.add_argument("--runtime", type=runtimes, default=["subprocess"], help="a,b,...")
    args = parser.parse_args()
    overrides = [
        f"data.num_clients={args.clients}",
        f"rounds={args.rounds}",
        f"dpfl.budget={args.budget}",
        "data.num_train=4000",
        "data.num_test=2000",
        "epochs=1",
        "dpfl.init_epochs=2",
    ]
    config = load_config(None, overrides)
    by_runtime = {rt: measure(config, args.clients, args.rounds, rt) for rt in args.runtime}
    figures: dict[str, Any] = {"runtimes": by_runtime}
    if len(by_runtime) > 1:
        figures["ratio_to_" + args.runtime[0]] = compare(by_runtime)
    path = write_results("federation_round", figures, vars(args) | {"overrides": overrides})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
